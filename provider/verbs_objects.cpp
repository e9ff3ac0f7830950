// Verbs objects mapped onto the emulator: PD, MR, CQ (with completion
// channels), QP, SRQ, and the async events they raise.  Each ibv_* object
// libibverbs sees is the head of a provider struct that points at the
// emulator object; the emulator object's user_context points back.  Nothing
// here reaches the kernel (no ibv_cmd_*).  Conversions are field copies:
// the emulator's enums carry the ibv_* numeric values (checked below).
#include <dlfcn.h>
#include <endian.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <memory>
#include <new>
#include <unordered_set>
#include <vector>

#include "emulator/emulator.h"
#include "provider/abi_guard.h"
#include "provider/provider.h"

namespace iwemu::provider {
namespace {

// ---- 1:1 value checks (emulator/verbs_types.h promises ibv_* numbers) ----
static_assert(static_cast<int>(WcStatus::wr_flush_err) == IBV_WC_WR_FLUSH_ERR);
static_assert(static_cast<int>(WcStatus::general_err) == IBV_WC_GENERAL_ERR);
static_assert(static_cast<int>(WcOpcode::recv) == IBV_WC_RECV);
static_assert(static_cast<int>(WcOpcode::rdma_read) == IBV_WC_RDMA_READ);
static_assert(static_cast<int>(WrOpcode::send_with_inv) == IBV_WR_SEND_WITH_INV);
static_assert(static_cast<int>(WrOpcode::rdma_read) == IBV_WR_RDMA_READ);
static_assert(send_signaled == IBV_SEND_SIGNALED && send_inline == IBV_SEND_INLINE);
static_assert(access_remote_read == IBV_ACCESS_REMOTE_READ && access_zero_based == IBV_ACCESS_ZERO_BASED);
static_assert(static_cast<int>(QpState::err) == IBV_QPS_ERR);
static_assert(qp_attr_cap == IBV_QP_CAP && qp_attr_dest_qpn == IBV_QP_DEST_QPN);
static_assert(static_cast<int>(AsyncEventType::gid_change) == IBV_EVENT_GID_CHANGE);
static_assert(wc_with_inv == IBV_WC_WITH_INV && wc_with_imm == IBV_WC_WITH_IMM);
static_assert(srq_attr_limit == IBV_SRQ_LIMIT);
// ibv_sge is passed to the emulator as is.
static_assert(sizeof(Sge) == sizeof(ibv_sge) && offsetof(Sge, lkey) == offsetof(ibv_sge, lkey) &&
              offsetof(Sge, length) == offsetof(ibv_sge, length));

Emulator& emu() { return Emulator::instance(); }

// Returns a verbs-style result: 0, or a positive errno also left in errno
// for the NULL-returning constructors.
template <typename T>
T* fail(int err)
{
    errno = err;
    return nullptr;
}

struct Pd {
    ibv_pd ibv;
    ProtectionDomain* emu;
};
struct Mr {
    verbs_mr vmr;
    MemoryRegion* emu;
};
// Our end of a completion channel.  Owned by the CQ's event handler (and
// any copy of it an emulator thread is still running), so the fd is closed
// only when no handler can write to it any more: never a write to a reused
// fd number after destroy_cq.
struct ChannelSender {
    explicit ChannelSender(int f) : fd(f) {}
    ChannelSender(const ChannelSender&) = delete;
    ChannelSender& operator=(const ChannelSender&) = delete;
    ~ChannelSender() { close(fd); }
    const int fd;
};

struct Cq {
    ibv_cq ibv;
    CompletionQueue* emu;
    std::shared_ptr<ChannelSender> sender;  // null without a completion channel

    void notify() const
    {
        const uint64_t handle = reinterpret_cast<uintptr_t>(&ibv);
        send(sender->fd, &handle, sizeof handle, MSG_DONTWAIT | MSG_NOSIGNAL);
    }
};

struct Srq {
    ibv_srq ibv;
    SharedReceiveQueue* emu;
};
struct Qp {
    verbs_qp vqp;
    QueuePair* emu;
};

}  // namespace

// Objects a context created and has not destroyed.  Touched only on the
// create/destroy paths, never on the data path.
struct ContextObjects {
    std::mutex lock;
    std::unordered_set<Pd*> pds;
    std::unordered_set<Mr*> mrs;
    std::unordered_set<Cq*> cqs;
    std::unordered_set<Srq*> srqs;
    std::unordered_set<Qp*> qps;
};

namespace {

template <typename T>
void track(ibv_context* ctx, std::unordered_set<T*> ContextObjects::*set, T* obj)
{
    ContextObjects* objs = to_context(ctx)->objects;
    std::lock_guard lock(objs->lock);
    (objs->*set).insert(obj);
}

template <typename T>
void untrack(ibv_context* ctx, std::unordered_set<T*> ContextObjects::*set, T* obj)
{
    ContextObjects* objs = to_context(ctx)->objects;
    std::lock_guard lock(objs->lock);
    (objs->*set).erase(obj);
}

Pd* to_pd(ibv_pd* p) { return reinterpret_cast<Pd*>(p); }
Cq* to_cq(ibv_cq* c) { return reinterpret_cast<Cq*>(c); }
Srq* to_srq(ibv_srq* s) { return reinterpret_cast<Srq*>(s); }
Qp* to_qp(ibv_qp* q) { return reinterpret_cast<Qp*>(q); }

// ---- async events --------------------------------------------------------

std::mutex g_contexts_lock;
std::vector<Context*>& contexts()
{
    static auto* list = new std::vector<Context*>;
    return *list;
}

ibv_context* owner_of(const AsyncEvent& ev)
{
    if (ev.qp && ev.qp->user_context) return static_cast<Qp*>(ev.qp->user_context)->vqp.qp.context;
    if (ev.cq && ev.cq->user_context) return static_cast<Cq*>(ev.cq->user_context)->ibv.context;
    if (ev.srq && ev.srq->user_context) return static_cast<Srq*>(ev.srq->user_context)->ibv.context;
    return nullptr;
}

void on_async_event(const AsyncEvent& ev)
{
    const auto type = static_cast<ibv_event_type>(ev.type);
    std::lock_guard lock(g_contexts_lock);
    ibv_context* owner = owner_of(ev);
    // A context closed while its objects live (ibv_close_device does not
    // destroy them) no longer receives their events.
    if (owner && std::find(contexts().begin(), contexts().end(), to_context(owner)) == contexts().end()) return;
    if (owner) {
        uint64_t element = ev.qp   ? reinterpret_cast<uintptr_t>(&static_cast<Qp*>(ev.qp->user_context)->vqp.qp)
                           : ev.cq ? reinterpret_cast<uintptr_t>(&static_cast<Cq*>(ev.cq->user_context)->ibv)
                                   : reinterpret_cast<uintptr_t>(&static_cast<Srq*>(ev.srq->user_context)->ibv);
        post_async_event(to_context(owner), element, type);
        return;
    }
    if (ev.qp || ev.cq || ev.srq) return;  // object not (or no longer) exposed
    for (Context* ctx : contexts()) post_async_event(ctx, ev.port_num, type);  // port / device events
}

// Destroys an emulator object that may raise async events: unlinked from
// its provider struct first (under the routing lock), so an event racing
// with the destroy finds no owner instead of a freed struct; relinked if
// the emulator refuses (EBUSY).
template <typename EmuObject, typename Provider, typename Destroy>
int detach_and_destroy(EmuObject* obj, Provider* mine, Destroy destroy)
{
    {
        std::lock_guard lock(g_contexts_lock);
        obj->user_context = nullptr;
    }
    int err = destroy(obj);
    if (err) {
        std::lock_guard lock(g_contexts_lock);
        obj->user_context = mine;
    }
    return err;
}

// ---- PD ------------------------------------------------------------------

ibv_pd* alloc_pd(ibv_context* ctx)
{
    auto* pd = static_cast<Pd*>(calloc(1, sizeof(Pd)));
    if (!pd) return fail<ibv_pd>(ENOMEM);
    if (int err = emu().alloc_pd(&pd->emu)) {
        free(pd);
        return fail<ibv_pd>(err);
    }
    pd->emu->user_context = pd;
    pd->ibv.handle = pd->emu->handle();
    track(ctx, &ContextObjects::pds, pd);
    return &pd->ibv;
}

int dealloc_pd(ibv_pd* ibpd)
{
    Pd* pd = to_pd(ibpd);
    if (int err = emu().dealloc_pd(pd->emu)) return err;
    untrack(ibpd->context, &ContextObjects::pds, pd);
    free(pd);
    return 0;
}

// ---- MR ------------------------------------------------------------------

ibv_mr* reg_mr(ibv_pd* ibpd, void* addr, size_t length, uint64_t hca_va, int access)
{
    auto* mr = static_cast<Mr*>(calloc(1, sizeof(Mr)));
    if (!mr) return fail<ibv_mr>(ENOMEM);
    // The kernel (ib_core) accepts REMOTE_ATOMIC on any device as long as
    // LOCAL_WRITE is set, and qperf always asks for it; with atomic_cap NONE
    // the right can never be exercised, so the emulator does not see it.
    uint32_t emu_access = static_cast<uint32_t>(access);
    if ((emu_access & access_remote_atomic) && (emu_access & access_local_write)) emu_access &= ~access_remote_atomic;
    if (int err = emu().reg_mr(to_pd(ibpd)->emu, addr, length, hca_va, emu_access, &mr->emu)) {
        free(mr);
        return fail<ibv_mr>(err);
    }
    mr->emu->user_context = mr;
    mr->vmr.mr_type = IBV_MR_TYPE_MR;
    mr->vmr.access = access;
    mr->vmr.ibv_mr.lkey = mr->emu->lkey();
    mr->vmr.ibv_mr.rkey = mr->emu->rkey();
    mr->vmr.ibv_mr.handle = mr->emu->stag();
    track(ibpd->context, &ContextObjects::mrs, mr);
    return &mr->vmr.ibv_mr;  // libibverbs fills context, pd, addr, length
}

int dereg_mr(verbs_mr* vmr)
{
    Mr* mr = reinterpret_cast<Mr*>(vmr);
    if (int err = emu().dereg_mr(mr->emu)) return err;
    untrack(vmr->ibv_mr.context, &ContextObjects::mrs, mr);
    free(mr);
    return 0;
}

// ---- CQ and completion channels -------------------------------------------

using ChannelSenderFn = int (*)(int);

// The shim owns completion channels (it answered CREATE_COMP_CHANNEL); it
// is preloaded, so its symbol is in the global scope (kernel-surface §7.3.30).
int channel_sender_for(ibv_comp_channel* channel)
{
    static auto fn = reinterpret_cast<ChannelSenderFn>(dlsym(RTLD_DEFAULT, "iwemu_shim_comp_channel_sender"));
    if (!fn) {
        errno = EINVAL;
        return -1;
    }
    return fn(channel->fd);
}

ibv_cq* create_cq(ibv_context* ctx, int cqe, ibv_comp_channel* channel, int comp_vector)
{
    if (cqe <= 0 || comp_vector < 0 || comp_vector >= ctx->num_comp_vectors) return fail<ibv_cq>(EINVAL);
    std::shared_ptr<ChannelSender> sender;
    if (channel) {
        int fd = channel_sender_for(channel);
        if (fd < 0) return fail<ibv_cq>(errno);
        sender = std::make_shared<ChannelSender>(fd);
    }
    auto* mem = calloc(1, sizeof(Cq));
    if (!mem) return fail<ibv_cq>(ENOMEM);
    auto* cq = new (mem) Cq{};
    if (int err = emu().create_cq(static_cast<uint32_t>(cqe), &cq->emu)) {
        cq->~Cq();
        free(cq);
        return fail<ibv_cq>(err);
    }
    cq->emu->user_context = cq;
    cq->ibv.cqe = static_cast<int>(cq->emu->capacity());
    cq->ibv.handle = 0;
    if (sender) {
        // One 8-byte ib_uverbs_comp_event_desc per armed completion; the
        // element is the ibv_cq* ibv_get_cq_event hands back.
        cq->sender = sender;
        const uint64_t handle = reinterpret_cast<uintptr_t>(&cq->ibv);
        cq->emu->set_event_handler([sender = std::move(sender), handle] {
            send(sender->fd, &handle, sizeof handle, MSG_DONTWAIT | MSG_NOSIGNAL);
        });
    }
    track(ctx, &ContextObjects::cqs, cq);
    return &cq->ibv;  // libibverbs runs verbs_init_cq (context, channel, mutex/cond)
}

int destroy_cq(ibv_cq* ibcq)
{
    Cq* cq = to_cq(ibcq);
    if (int err = detach_and_destroy(cq->emu, cq, [](CompletionQueue* c) { return emu().destroy_cq(c); }))
        return err;
    untrack(ibcq->context, &ContextObjects::cqs, cq);
    cq->~Cq();
    free(cq);
    return 0;
}

int poll_cq(ibv_cq* ibcq, int num_entries, ibv_wc* wc)
{
    constexpr int kBatch = 16;
    Completion c[kBatch];
    int total = 0;
    while (total < num_entries) {
        const int n = to_cq(ibcq)->emu->poll(c, std::min(kBatch, num_entries - total));
        for (int i = 0; i < n; ++i) {
            ibv_wc& w = wc[total + i];
            w.wr_id = c[i].wr_id;
            w.status = static_cast<ibv_wc_status>(c[i].status);
            w.opcode = static_cast<ibv_wc_opcode>(c[i].opcode);
            w.vendor_err = c[i].vendor_err;
            w.byte_len = c[i].byte_len;
            if (c[i].wc_flags & wc_with_imm)
                w.imm_data = htobe32(c[i].imm_data_or_inv_rkey);
            else
                w.invalidated_rkey = c[i].imm_data_or_inv_rkey;
            w.qp_num = c[i].qp_num;
            w.src_qp = c[i].src_qp;
            w.wc_flags = c[i].wc_flags;
            w.pkey_index = 0;
            w.slid = 0;
            w.sl = 0;
            w.dlid_path_bits = 0;
        }
        total += n;
        if (n < kBatch) break;
    }
    return total;
}

// Arming a CQ that already holds completions signals at once, as RNICs do
// (the arm compares against the consumer index): the usual "wait, re-arm,
// poll a batch, wait" loop would otherwise sleep on completions that are
// already there.  A completion racing with the arm can cost one spurious
// event, never a lost one.
int req_notify_cq(ibv_cq* ibcq, int solicited_only)
{
    Cq* cq = to_cq(ibcq);
    const bool next = solicited_only == 0;
    if (next && cq->sender && cq->emu->size() > 0) {
        cq->notify();
        return 0;
    }
    if (int err = cq->emu->req_notify(!next)) return err;
    if (next && cq->sender && cq->emu->size() > 0) cq->notify();
    return 0;
}

// ---- SRQ -----------------------------------------------------------------

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

// Receive WRs go to the emulator in stack batches: no allocation on the
// data path.  *bad names the first WR not posted.
template <typename PostFn>
int post_recv_chain(ibv_recv_wr* wr, ibv_recv_wr** bad, PostFn post)
{
    constexpr size_t kBatch = 32;
    RecvWr batch[kBatch];
    ibv_recv_wr* src[kBatch];
    while (wr) {
        size_t n = 0;
        for (; wr && n < kBatch; wr = wr->next, ++n) {
            src[n] = wr;
            batch[n].wr_id = wr->wr_id;
            batch[n].sg_list = reinterpret_cast<const Sge*>(wr->sg_list);
            batch[n].num_sge = static_cast<uint32_t>(wr->num_sge);
            if (wr->num_sge < 0) {
                *bad = wr;
                return EINVAL;
            }
        }
        size_t failed = 0;
        if (int err = post(batch, n, &failed)) {
            *bad = src[std::min(failed, n - 1)];
            return err;
        }
    }
    return 0;
}

int post_srq_recv(ibv_srq* ibsrq, ibv_recv_wr* wr, ibv_recv_wr** bad)
{
    SharedReceiveQueue* srq = to_srq(ibsrq)->emu;
    return post_recv_chain(wr, bad, [srq](const RecvWr* w, size_t n, size_t* f) { return srq->post_recv(w, n, f); });
}

// ---- QP ------------------------------------------------------------------

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

ibv_qp* create_qp_ex(ibv_context* ctx, ibv_qp_init_attr_ex* init_ex)
{
    // Only the fields of plain ibv_qp_init_attr plus the PD.
    if (!(init_ex->comp_mask & IBV_QP_INIT_ATTR_PD) || (init_ex->comp_mask & ~uint32_t{IBV_QP_INIT_ATTR_PD}))
        return fail<ibv_qp>(EOPNOTSUPP);
    ibv_qp_init_attr init{};
    init.qp_context = init_ex->qp_context;
    init.send_cq = init_ex->send_cq;
    init.recv_cq = init_ex->recv_cq;
    init.srq = init_ex->srq;
    init.cap = init_ex->cap;
    init.qp_type = init_ex->qp_type;
    init.sq_sig_all = init_ex->sq_sig_all;
    ibv_qp* qp = create_qp_common(ctx, init_ex->pd, &init);
    if (qp) init_ex->cap = init.cap;
    return qp;
}

int destroy_qp(ibv_qp* ibqp)
{
    Qp* qp = to_qp(ibqp);
    if (int err = detach_and_destroy(qp->emu, qp, [](QueuePair* q) { return emu().destroy_qp(q); })) return err;
    untrack(ibqp->context, &ContextObjects::qps, qp);
    pthread_cond_destroy(&ibqp->cond);
    pthread_mutex_destroy(&ibqp->mutex);
    free(qp);
    return 0;
}

void to_emu_attr(const ibv_qp_attr& a, QpAttr* out)
{
    out->qp_state = static_cast<QpState>(a.qp_state);
    out->cur_qp_state = static_cast<QpState>(a.cur_qp_state);
    out->path_mtu = a.path_mtu;
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
    // An iWARP QP gets its connection from rdma_cm (the LLP stream), never
    // from an InfiniBand address vector and remote QPN.  IB-style connects
    // (perftest without -R, qperf without -cm1) fail here at once with a
    // clear error instead of leaving a QP in RTS with no peer.
    if (mask & (IBV_QP_AV | IBV_QP_DEST_QPN | IBV_QP_ALT_PATH)) return EOPNOTSUPP;
    QpAttr a;
    to_emu_attr(*attr, &a);
    return qp->modify(a, static_cast<uint32_t>(mask));
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
    SendWr batch[kBatch];
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
            switch (wr->opcode) {
            case IBV_WR_SEND_WITH_INV:
            case IBV_WR_LOCAL_INV:
                s.invalidate_rkey = wr->invalidate_rkey;
                break;
            case IBV_WR_SEND_WITH_IMM:
            case IBV_WR_RDMA_WRITE_WITH_IMM:
                s.imm_data = be32toh(wr->imm_data);
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
void cq_event(ibv_cq*) {}

}  // namespace

void register_context(Context* ctx)
{
    static std::once_flag once;
    std::call_once(once, [] { emu().set_async_event_handler(on_async_event); });
    ctx->objects = new ContextObjects;
    std::lock_guard lock(g_contexts_lock);
    contexts().push_back(ctx);
}

void unregister_context(Context* ctx)
{
    {
        std::lock_guard lock(g_contexts_lock);
        auto& list = contexts();
        list.erase(std::remove(list.begin(), list.end(), ctx), list.end());
    }
    ContextObjects* objs = ctx->objects;
    if (!objs) return;
    ctx->objects = nullptr;
    // What the application left behind goes as it would with the kernel's
    // uverbs file: QPs first (their connections are aborted), then what
    // they used.  The ibv_* handles the application may still hold die here.
    for (Qp* qp : objs->qps) {
        detach_and_destroy(qp->emu, qp, [](QueuePair* q) { return emu().destroy_qp(q); });
        pthread_cond_destroy(&qp->vqp.qp.cond);
        pthread_mutex_destroy(&qp->vqp.qp.mutex);
        free(qp);
    }
    for (Srq* srq : objs->srqs) {
        detach_and_destroy(srq->emu, srq, [](SharedReceiveQueue* q) { return emu().destroy_srq(q); });
        free(srq);
    }
    for (Cq* cq : objs->cqs) {
        detach_and_destroy(cq->emu, cq, [](CompletionQueue* c) { return emu().destroy_cq(c); });
        cq->~Cq();
        free(cq);
    }
    for (Mr* mr : objs->mrs) {
        emu().dereg_mr(mr->emu);
        free(mr);
    }
    for (Pd* pd : objs->pds) {
        emu().dealloc_pd(pd->emu);
        free(pd);
    }
    delete objs;
}

const verbs_context_ops kObjectOps = [] {
    verbs_context_ops ops{};
    ops.alloc_pd = Guard<alloc_pd>::call;
    ops.dealloc_pd = Guard<dealloc_pd>::call;
    ops.reg_mr = Guard<reg_mr>::call;
    ops.dereg_mr = Guard<dereg_mr>::call;
    ops.create_cq = Guard<create_cq>::call;
    ops.destroy_cq = Guard<destroy_cq>::call;
    ops.poll_cq = Guard<poll_cq>::call;
    ops.req_notify_cq = Guard<req_notify_cq>::call;
    ops.cq_event = Guard<cq_event>::call;
    ops.create_srq = Guard<create_srq>::call;
    ops.destroy_srq = Guard<destroy_srq>::call;
    ops.modify_srq = Guard<modify_srq>::call;
    ops.query_srq = Guard<query_srq>::call;
    ops.post_srq_recv = Guard<post_srq_recv>::call;
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
