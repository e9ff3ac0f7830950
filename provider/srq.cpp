// Shared receive queues.
#include <cstdlib>

#include "provider/abi_guard.h"
#include "provider/objects.h"

namespace iwemu::provider {
namespace {

ibv_srq* create_srq(ibv_pd* ibpd, ibv_srq_init_attr* init)
{
    auto* srq = static_cast<Srq*>(calloc(1, sizeof(Srq)));
    if (!srq) return fail<ibv_srq>(ENOMEM);
    SrqAttr attr{init->attr.max_wr, init->attr.max_sge, init->attr.srq_limit};
    if (int err = emu().create_srq(to_pd(ibpd)->emu, attr, &srq->emu)) {
        free(srq);
        return fail<ibv_srq>(err);
    }
    srq->emu->user_context = srq;
    SrqAttr granted{};
    if (srq->emu->query(&granted) == 0) {
        init->attr.max_wr = granted.max_wr;
        init->attr.max_sge = granted.max_sge;
    }
    srq->ibv.handle = 0;
    track(ibpd->context, &ContextObjects::srqs, srq);
    return &srq->ibv;  // libibverbs fills context, srq_context, pd, mutex/cond
}

int destroy_srq(ibv_srq* ibsrq)
{
    Srq* srq = to_srq(ibsrq);
    if (int err = detach_and_destroy(srq->emu, srq, [](SharedReceiveQueue* q) { return emu().destroy_srq(q); }))
        return err;
    untrack(ibsrq->context, &ContextObjects::srqs, srq);
    free(srq);
    return 0;
}

int modify_srq(ibv_srq* ibsrq, ibv_srq_attr* attr, int mask)
{
    return to_srq(ibsrq)->emu->modify({attr->max_wr, attr->max_sge, attr->srq_limit}, static_cast<uint32_t>(mask));
}

int query_srq(ibv_srq* ibsrq, ibv_srq_attr* attr)
{
    SrqAttr a{};
    if (int err = to_srq(ibsrq)->emu->query(&a)) return err;
    attr->max_wr = a.max_wr;
    attr->max_sge = a.max_sge;
    attr->srq_limit = a.srq_limit;
    return 0;
}

int post_srq_recv(ibv_srq* ibsrq, ibv_recv_wr* wr, ibv_recv_wr** bad)
{
    SharedReceiveQueue* srq = to_srq(ibsrq)->emu;
    return post_recv_chain(wr, bad, [srq](const RecvWr* w, size_t n, size_t* f) { return srq->post_recv(w, n, f); });
}

}  // namespace

const verbs_context_ops kSrqOps = [] {
    verbs_context_ops ops{};
    ops.create_srq = Guard<create_srq>::call;
    ops.destroy_srq = Guard<destroy_srq>::call;
    ops.modify_srq = Guard<modify_srq>::call;
    ops.query_srq = Guard<query_srq>::call;
    ops.post_srq_recv = Guard<post_srq_recv>::call;
    return ops;
}();

}  // namespace iwemu::provider
