// A read-only copy of the process's verbs objects, for the shim's RDMA
// netlink answers (rdma resource show, rdma statistic show).  Taken under
// the object lock once per netlink request; nothing on the data path.
#pragma once

#include <cstdint>
#include <vector>

#include "emulator/status/status_reader.h"

namespace iwemu {

struct ResourceSnapshot {
    struct Qp {
        uint32_t qp_num;
        uint32_t pdn;
        uint8_t state;  // QpState (== ib_qp_state)
        uint32_t pid = 0;  // 0: this process; else another iwemu process's QP (status segment)
        CounterValues counters;
    };
    struct Cq {
        uint32_t cqn;   // creation order, 1-based
        uint32_t cqe;
        uint64_t users; // QPs that complete into it
    };
    struct Mr {
        uint32_t stag;  // lkey == rkey
        uint64_t iova;
        uint64_t length;
        uint32_t pdn;
    };
    struct Pd {
        uint32_t pdn;
        uint64_t users; // MRs, QPs and SRQs naming it
    };
    std::vector<Qp> qps;
    std::vector<Cq> cqs;
    std::vector<Mr> mrs;
    std::vector<Pd> pds;
    uint32_t srqs = 0;
    // The port's counters: sums over the live QPs (QpCounters), and in the
    // shim's answers over every iwemu process's live and destroyed QPs.
    CounterValues port;
};

}  // namespace iwemu
