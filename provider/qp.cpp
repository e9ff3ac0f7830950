// RC queue pairs: creation, state changes, work requests.
#include <endian.h>
#include <pthread.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>

#include "emulator/qp_endpoint.h"
#include "provider/abi_guard.h"
#include "provider/objects.h"

namespace iwemu::provider {
namespace {

ibv_qp* create_qp_common(ibv_context* ctx, ibv_pd* ibpd, ibv_qp_init_attr* init)
{
    if (init->qp_type != IBV_QPT_RC) return fail<ibv_qp>(EOPNOTSUPP);  // iWARP is RC only
    if (!init->send_cq || !init->recv_cq) return fail<ibv_qp>(EINVAL);
    auto* qp = static_cast<Qp*>(calloc(1, sizeof(Qp)));
    if (!qp) return fail<ibv_qp>(ENOMEM);

    QpInitAttr attr;
    attr.send_cq = to_cq(init->send_cq)->emu;
    attr.recv_cq = to_cq(init->recv_cq)->emu;
    attr.srq = init->srq ? to_srq(init->srq)->emu : nullptr;
    attr.cap = {init->cap.max_send_wr, init->cap.max_recv_wr, init->cap.max_send_sge, init->cap.max_recv_sge,
                init->cap.max_inline_data};
    attr.sq_sig_all = init->sq_sig_all != 0;
    if (int err = emu().create_qp(to_pd(ibpd)->emu, attr, &qp->emu)) {
        free(qp);
        return fail<ibv_qp>(err);
    }
    qp->emu->user_context = qp;
    init->cap.max_send_wr = attr.cap.max_send_wr;
    init->cap.max_recv_wr = attr.cap.max_recv_wr;
    init->cap.max_send_sge = attr.cap.max_send_sge;
    init->cap.max_recv_sge = attr.cap.max_recv_sge;
    init->cap.max_inline_data = attr.cap.max_inline_data;

    // ibv_create_qp touches nothing after the op (kernel-surface §2.9).
    ibv_qp& q = qp->vqp.qp;
    q.context = ctx;
    q.qp_context = init->qp_context;
    q.pd = ibpd;
    q.send_cq = init->send_cq;
    q.recv_cq = init->recv_cq;
    q.srq = init->srq;
    q.handle = qp->emu->qp_num();
    q.qp_num = qp->emu->qp_num();
    // As the kernel path sets it (libibverbs' create_qp response handling);
    // ibv_query_qp reports INIT, siw's IDLE, and libibverbs then copies that here.
    q.state = IBV_QPS_RESET;
    q.qp_type = IBV_QPT_RC;
    q.events_completed = 0;
    pthread_mutex_init(&q.mutex, nullptr);
    pthread_cond_init(&q.cond, nullptr);
    qp->vqp.comp_mask = 0;  // no ibv_qp_ex post API: ibv_qp_to_qp_ex() says so
    track(ctx, &ContextObjects::qps, qp);
    return &q;
}

ibv_qp* create_qp(ibv_pd* pd, ibv_qp_init_attr* init) { return create_qp_common(pd->context, pd, init); }

int destroy_qp(ibv_qp* ibqp);

ibv_qp* create_qp_ex(ibv_context* ctx, ibv_qp_init_attr_ex* init_ex)
{
    // The fields of plain ibv_qp_init_attr plus the PD, no creation flags,
    // and the ibv_wr_* operations (qp_ex.cpp).  As rxe: EOPNOTSUPP for the rest.
    constexpr uint32_t kSupported =
        IBV_QP_INIT_ATTR_PD | IBV_QP_INIT_ATTR_CREATE_FLAGS | IBV_QP_INIT_ATTR_SEND_OPS_FLAGS;
    const uint32_t mask = init_ex->comp_mask;
    if (!(mask & IBV_QP_INIT_ATTR_PD) || (mask & ~kSupported)) return fail<ibv_qp>(EOPNOTSUPP);
    if ((mask & IBV_QP_INIT_ATTR_CREATE_FLAGS) && init_ex->create_flags) return fail<ibv_qp>(EOPNOTSUPP);
    const bool ops = mask & IBV_QP_INIT_ATTR_SEND_OPS_FLAGS;
    if (ops)
        if (int err = check_send_ops(init_ex->send_ops_flags)) return fail<ibv_qp>(err);
    ibv_qp_init_attr init{};
    init.qp_context = init_ex->qp_context;
    init.send_cq = init_ex->send_cq;
    init.recv_cq = init_ex->recv_cq;
    init.srq = init_ex->srq;
    init.cap = init_ex->cap;
    init.qp_type = init_ex->qp_type;
    init.sq_sig_all = init_ex->sq_sig_all;
    ibv_qp* qp = create_qp_common(ctx, init_ex->pd, &init);
    if (!qp) return nullptr;
    if (ops) {
        if (int err = attach_qp_ex(to_qp(qp), init_ex->send_ops_flags, init.cap)) {
            destroy_qp(qp);
            return fail<ibv_qp>(err);
        }
    }
    init_ex->cap = init.cap;
    return qp;
}

int destroy_qp(ibv_qp* ibqp)
{
    Qp* qp = to_qp(ibqp);
    if (int err = detach_and_destroy(qp->emu, qp, [](QueuePair* q) { return emu().destroy_qp(q); })) return err;
    untrack(ibqp->context, &ContextObjects::qps, qp);
    pthread_cond_destroy(&ibqp->cond);
    pthread_mutex_destroy(&ibqp->mutex);
    free_qp_ex(qp);
    free(qp);
    return 0;
}

// Fields outside the mask may be garbage (librdmacm's rdma_disconnect sets
// qp_state only): an enum is loaded only when the mask names it.
void to_emu_attr(const ibv_qp_attr& a, int mask, QpAttr* out)
{
    if (mask & IBV_QP_STATE) out->qp_state = static_cast<QpState>(a.qp_state);
    if (mask & IBV_QP_CUR_STATE) out->cur_qp_state = static_cast<QpState>(a.cur_qp_state);
    if (mask & IBV_QP_PATH_MTU) out->path_mtu = a.path_mtu;
    out->qp_access_flags = a.qp_access_flags;
    out->cap = {a.cap.max_send_wr, a.cap.max_recv_wr, a.cap.max_send_sge, a.cap.max_recv_sge, a.cap.max_inline_data};
    out->pkey_index = a.pkey_index;
    out->en_sqd_async_notify = a.en_sqd_async_notify;
    out->sq_draining = a.sq_draining;
    out->max_rd_atomic = a.max_rd_atomic;
    out->max_dest_rd_atomic = a.max_dest_rd_atomic;
    out->port_num = a.port_num;
    out->timeout = a.timeout;
    out->retry_cnt = a.retry_cnt;
    out->rnr_retry = a.rnr_retry;
    out->min_rnr_timer = a.min_rnr_timer;
    out->dest_qp_num = a.dest_qp_num;
    out->rq_psn = a.rq_psn;
    out->sq_psn = a.sq_psn;
}

int modify_qp(ibv_qp* ibqp, ibv_qp_attr* attr, int mask)
{
    QueuePair* qp = to_qp(ibqp)->emu;
    // librdmacm's rdma_disconnect moves an iWARP QP to SQD first and gives
    // up if that fails; after the peer closed or a Terminate the QP is
    // already in ERROR/SQE.  Like kernel siw, accept the request as a no-op
    // there (kernel-surface.md §7.3 item 28).
    if ((mask & IBV_QP_STATE) && mask == IBV_QP_STATE && attr->qp_state == IBV_QPS_SQD &&
        (qp->state() == QpState::err || qp->state() == QpState::sqe))
        return 0;
    // The connect started at RTR may fail before the application asks for
    // RTS: let that request pass (the QP stays in ERROR) so the failure is
    // reported the IB way, as QP_FATAL and flushed work requests.
    if ((mask & IBV_QP_STATE) && attr->qp_state == IBV_QPS_RTS && qp->state() == QpState::err &&
        emu().qp_endpoint().link_failed(qp->qp_num()))
        return 0;
    // IB-style connect (perftest without -R, ibv_rc_pingpong): RTR with an
    // address vector and a destination QPN.  Real iWARP cannot do this; iwemu
    // dials the peer's QP endpoint (docs/oob-connect.md).  Only the GRH
    // (dgid) locates a peer: a LID-only AV cannot.
    if (mask & IBV_QP_ALT_PATH) return EOPNOTSUPP;
    const bool oob = (mask & (IBV_QP_AV | IBV_QP_DEST_QPN)) != 0;
    if (oob && (!(mask & IBV_QP_STATE) || attr->qp_state != IBV_QPS_RTR ||
                (mask & (IBV_QP_AV | IBV_QP_DEST_QPN)) != (IBV_QP_AV | IBV_QP_DEST_QPN) || !attr->ah_attr.is_global))
        return EINVAL;
    ibv_gid sgid{};
    Gid local{}, remote{};
    if (oob) {
        const uint8_t port = attr->ah_attr.port_num ? attr->ah_attr.port_num : 1;
        if (ibv_query_gid(ibqp->context, port, attr->ah_attr.grh.sgid_index, &sgid) != 0) return EINVAL;
        std::memcpy(local.data(), sgid.raw, local.size());
        std::memcpy(remote.data(), attr->ah_attr.grh.dgid.raw, remote.size());
        // Refuse an unusable peer before the QP changes state.
        if (int err = QpEndpoint::check_peer(qp->qp_num(), local, remote, attr->dest_qp_num)) return err;
    }
    QpAttr a;
    to_emu_attr(*attr, mask, &a);
    if (!oob) {
        const int err = qp->modify(a, static_cast<uint32_t>(mask));
        // RESET forgets the peer a modify_qp connect was given.
        if (!err && (mask & IBV_QP_STATE) && attr->qp_state == IBV_QPS_RESET) emu().qp_endpoint().reset(qp->qp_num());
        return err;
    }
    if (int err = qp->modify(a, static_cast<uint32_t>(mask) & ~uint32_t{IBV_QP_AV | IBV_QP_DEST_QPN})) return err;
    return emu().qp_endpoint().connect(qp->qp_num(), local, remote, attr->dest_qp_num);
}

int query_qp(ibv_qp* ibqp, ibv_qp_attr* attr, int mask, ibv_qp_init_attr* init)
{
    QpAttr a;
    QpInitAttr ia;
    if (int err = to_qp(ibqp)->emu->query(&a, &ia)) return err;
    std::memset(attr, 0, sizeof *attr);
    attr->qp_state = static_cast<ibv_qp_state>(a.qp_state);
    attr->cur_qp_state = static_cast<ibv_qp_state>(a.cur_qp_state);
    attr->path_mtu = static_cast<ibv_mtu>(a.path_mtu);
    attr->qp_access_flags = a.qp_access_flags;
    attr->cap = {a.cap.max_send_wr, a.cap.max_recv_wr, a.cap.max_send_sge, a.cap.max_recv_sge, a.cap.max_inline_data};
    attr->pkey_index = a.pkey_index;
    attr->en_sqd_async_notify = a.en_sqd_async_notify;
    attr->sq_draining = a.sq_draining;
    attr->max_rd_atomic = a.max_rd_atomic;
    attr->max_dest_rd_atomic = a.max_dest_rd_atomic;
    attr->port_num = a.port_num;
    attr->timeout = a.timeout;
    attr->retry_cnt = a.retry_cnt;
    attr->rnr_retry = a.rnr_retry;
    attr->min_rnr_timer = a.min_rnr_timer;
    attr->dest_qp_num = a.dest_qp_num;
    attr->rq_psn = a.rq_psn;
    attr->sq_psn = a.sq_psn;
    if (init) {
        std::memset(init, 0, sizeof *init);
        init->qp_context = ibqp->qp_context;
        init->send_cq = ibqp->send_cq;
        init->recv_cq = ibqp->recv_cq;
        init->srq = ibqp->srq;
        init->cap = attr->cap;
        init->qp_type = IBV_QPT_RC;
        init->sq_sig_all = ia.sq_sig_all;
    }
    return 0;
}

int post_send(ibv_qp* ibqp, ibv_send_wr* wr, ibv_send_wr** bad)
{
    constexpr size_t kBatch = 32;
    StackBatch<SendWr, kBatch> storage;
    SendWr* const batch = storage.items;
    ibv_send_wr* src[kBatch];
    QueuePair* qp = to_qp(ibqp)->emu;
    while (wr) {
        size_t n = 0;
        for (; wr && n < kBatch; wr = wr->next, ++n) {
            if (wr->num_sge < 0) {
                *bad = wr;
                return EINVAL;
            }
            src[n] = wr;
            SendWr& s = batch[n];
            s.wr_id = wr->wr_id;
            s.opcode = static_cast<WrOpcode>(wr->opcode);
            s.send_flags = wr->send_flags;
            s.sg_list = reinterpret_cast<const Sge*>(wr->sg_list);
            s.num_sge = static_cast<uint32_t>(wr->num_sge);
            s.remote_addr = wr->wr.rdma.remote_addr;
            s.rkey = wr->wr.rdma.rkey;
            s.invalidate_rkey = 0;
            s.imm_data = 0;
            s.compare_add = 0;
            s.swap = 0;
            switch (wr->opcode) {
            case IBV_WR_SEND_WITH_INV:
            case IBV_WR_LOCAL_INV:
                s.invalidate_rkey = wr->invalidate_rkey;
                break;
            case IBV_WR_SEND_WITH_IMM:
            case IBV_WR_RDMA_WRITE_WITH_IMM:
                s.imm_data = be32toh(wr->imm_data);
                break;
            case IBV_WR_ATOMIC_CMP_AND_SWP:
            case IBV_WR_ATOMIC_FETCH_AND_ADD:
                // wr.atomic: its rkey is not where wr.rdma's is; values in host order.
                s.remote_addr = wr->wr.atomic.remote_addr;
                s.rkey = wr->wr.atomic.rkey;
                s.compare_add = wr->wr.atomic.compare_add;
                s.swap = wr->wr.atomic.swap;
                break;
            case IBV_WR_BIND_MW:  // mw.cpp
                s.bind = to_emu_bind(wr->bind_mw.mw, wr->bind_mw.rkey, wr->bind_mw.bind_info);
                break;
            default:
                break;
            }
        }
        size_t failed = 0;
        if (int err = qp->post_send(batch, n, &failed)) {
            *bad = src[std::min(failed, n - 1)];
            return err;
        }
    }
    return 0;
}

int post_recv(ibv_qp* ibqp, ibv_recv_wr* wr, ibv_recv_wr** bad)
{
    QueuePair* qp = to_qp(ibqp)->emu;
    return post_recv_chain(wr, bad, [qp](const RecvWr* w, size_t n, size_t* f) { return qp->post_recv(w, n, f); });
}


void async_event(ibv_context*, ibv_async_event*) {}  // accounting lives in libibverbs' ack path

}  // namespace

const verbs_context_ops kQpOps = [] {
    verbs_context_ops ops{};
    ops.create_qp = Guard<create_qp>::call;
    ops.create_qp_ex = Guard<create_qp_ex>::call;
    ops.destroy_qp = Guard<destroy_qp>::call;
    ops.modify_qp = Guard<modify_qp>::call;
    ops.query_qp = Guard<query_qp>::call;
    ops.post_send = Guard<post_send>::call;
    ops.post_recv = Guard<post_recv>::call;
    ops.async_event = Guard<async_event>::call;
    return ops;
}();

}  // namespace iwemu::provider
