// Creation attributes of the one kind of QP the integration tests make: RC,
// both completion queues on one CQ, receives from srq when given.
#pragma once

#include <infiniband/verbs.h>

namespace iwemu::test {

inline ibv_qp_init_attr rc_qp_attr(ibv_cq* cq, ibv_qp_cap cap, ibv_srq* srq = nullptr)
{
    ibv_qp_init_attr ia{};
    ia.send_cq = cq;
    ia.recv_cq = cq;
    ia.srq = srq;
    ia.qp_type = IBV_QPT_RC;
    ia.cap = cap;
    return ia;
}

}  // namespace iwemu::test
