// Internal to the provider: the structs behind the ibv_* objects handed to
// libibverbs, the per-context object registry, and helpers shared by the
// files implementing the verbs (pd_mr.cpp, cq.cpp, srq.cpp, qp.cpp,
// context_objects.cpp).  Each ibv_* object is the head of a provider struct
// that points at the emulator object; the emulator object's user_context
// points back.  Conversions are field copies: the emulator's enums carry the
// ibv_* numeric values (checked below).  Nothing reaches the kernel.
#pragma once

#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstddef>
#include <memory>
#include <mutex>
#include <unordered_set>

#include "emulator/emulator.h"
#include "emulator/stack_batch.h"
#include "provider/provider.h"

namespace iwemu::provider {

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
static_assert(static_cast<int>(MwType::type2) == IBV_MW_TYPE_2 && static_cast<int>(WrOpcode::bind_mw) == IBV_WR_BIND_MW);
static_assert(static_cast<int>(WcOpcode::bind_mw) == IBV_WC_BIND_MW && static_cast<int>(WcStatus::mw_bind_err) == IBV_WC_MW_BIND_ERR);
static_assert(access_mw_bind == IBV_ACCESS_MW_BIND && access_remote_atomic == IBV_ACCESS_REMOTE_ATOMIC);
// ibv_sge is passed to the emulator as is.
static_assert(sizeof(Sge) == sizeof(ibv_sge) && offsetof(Sge, lkey) == offsetof(ibv_sge, lkey) &&
              offsetof(Sge, length) == offsetof(ibv_sge, length));

inline Emulator& emu() { return Emulator::instance(); }

// Returns a verbs-style result: 0, or a positive errno also left in errno
// for the NULL-returning constructors.
template <typename T>
inline T* fail(int err)
{
    errno = err;
    return nullptr;
}

// The same for the int-returning destroy verbs: with the kernel, libibverbs
// returns the errno of the failed write() to the uverbs fd, so errno holds it
// too, and programs print strerror(errno) (perftest on a busy PD).
inline int fail_status(int err)
{
    errno = err;
    return err;
}

// A parent domain (parent_domain.cpp) is a Pd too: `emu` is its protection
// domain's, so every verb taking a PD uses it unchanged; `parent` is set.
struct Pd {
    ibv_pd ibv;
    ProtectionDomain* emu;
    Pd* parent;                // parent domain: the protection domain it wraps
    uint32_t parent_domains;   // protection domain: parent domains on it (atomic ops)
    ibv_td* td;
    bool imported;             // ibv_import_pd's view of another context's PD (import.cpp)
    void* pd_context;
    void* (*alloc)(ibv_pd*, void*, size_t, size_t, uint64_t);
    void (*free_fn)(ibv_pd*, void*, void*, uint64_t);
};
// A parent domain's teardown (parent_domain.cpp); dealloc_pd forwards to it.
int dealloc_parent_domain(Pd* pd);
struct Mr {
    verbs_mr vmr;
    MemoryRegion* emu;
};
struct Mw {
    ibv_mw ibv;
    MemoryWindow* emu;
};
// Our end of a completion channel (a pipe, kmod-shim/comp_channel.h), one
// per channel, shared by its CQs.  Owned by the CQs' event handlers (and any
// copy of one an emulator thread is still running), so the fds are closed
// only when no handler can write any more: never a write to a reused fd
// number after destroy_cq.  `reader` keeps the pipe's read side open as
// long as a CQ may post (as the kernel's CQ holds its event file): a write
// never raises SIGPIPE, even if the application closed the channel's fd.
struct ChannelSender {
    ChannelSender(int f, int r, uint64_t p) : fd(f), reader(r), pipe(p) {}
    ChannelSender(const ChannelSender&) = delete;
    ChannelSender& operator=(const ChannelSender&) = delete;
    ~ChannelSender()
    {
        close(fd);
        if (reader >= 0) close(reader);
    }
    // One ib_uverbs_comp_event_desc; 8 octets, so the pipe writes it whole.
    void post(uint64_t cq_handle) const
    {
        ssize_t ignored = write(fd, &cq_handle, sizeof cq_handle);
        (void)ignored;  // full pipe: more events pending than CQs can owe (one per arm)
    }
    const int fd;
    const int reader;
    const uint64_t pipe;  // inode of the pipe: tells a reused channel address apart
};

// One layout for both kinds of CQ: ibv_cq_ex begins with the fields of
// ibv_cq, so the classic verbs (poll_cq, req_notify_cq, destroy_cq, the QP's
// CQ lookup) serve a CQ made by create_cq_ex unchanged.  `cur` is the entry
// an extended poll (start_poll .. end_poll) is reading.
struct Cq {
    union {
        ibv_cq ibv;
        ibv_cq_ex ex;
    };
    CompletionQueue* emu;
    Completion cur;
    uint64_t cur_stamp;  // cur's queueing time, on a CQ-ex with completion timestamps
};

struct Srq {
    ibv_srq ibv;
    SharedReceiveQueue* emu;
};
struct QpEx;  // qp_ex.cpp: the ibv_wr_* state of a QP made with send_ops_flags
struct Qp {
    verbs_qp vqp;
    QueuePair* emu;
    QpEx* ex;  // nullptr unless ibv_create_qp_ex gave IBV_QP_INIT_ATTR_SEND_OPS_FLAGS
};

// The extended post API (qp_ex.cpp).  check_send_ops: 0, or EOPNOTSUPP for
// an operation the device cannot do.  attach_qp_ex: fills vqp.qp_ex for a
// created QP with the granted caps; 0 or ENOMEM.  free_qp_ex: on destroy.
int check_send_ops(uint64_t send_ops_flags);
int attach_qp_ex(Qp* qp, uint64_t send_ops_flags, const ibv_qp_cap& granted);
void free_qp_ex(Qp* qp);

// Objects created on one uverbs file (the shim's open /dev/infiniband/
// uverbsN, shared by its dup'd fds) and not destroyed: every context on
// that file (the one ibv_open_device made, those ibv_import_device made
// from copies of its cmd fd) shares them, and they go when the last of
// those contexts is closed.  imported_*: ibv_import_pd/mr views of them
// (import.cpp), which own no emulator object.  Touched only on the
// create/destroy paths, never on the data path.
struct ContextObjects {
    uint64_t file = 0;      // iwemu_shim_uverbs_file(cmd_fd); 0: not shareable
    unsigned contexts = 1;  // contexts on the file (under routing_lock)
    std::mutex lock;
    std::unordered_set<Pd*> imported_pds;
    std::unordered_set<Mr*> imported_mrs;
    std::unordered_set<Pd*> pds;
    std::unordered_set<Mr*> mrs;
    std::unordered_set<Mw*> mws;
    std::unordered_set<Cq*> cqs;
    std::unordered_set<Srq*> srqs;
    std::unordered_set<Qp*> qps;
};

template <typename T>
inline void track(ibv_context* ctx, std::unordered_set<T*> ContextObjects::*set, T* obj)
{
    ContextObjects* objs = to_context(ctx)->objects;
    std::lock_guard lock(objs->lock);
    (objs->*set).insert(obj);
}

template <typename T>
inline void untrack(ibv_context* ctx, std::unordered_set<T*> ContextObjects::*set, T* obj)
{
    ContextObjects* objs = to_context(ctx)->objects;
    std::lock_guard lock(objs->lock);
    (objs->*set).erase(obj);
}

inline Pd* to_pd(ibv_pd* p) { return reinterpret_cast<Pd*>(p); }

// Destroying a PD or MR that imports share (import.cpp): the emulator
// object goes, and every other struct naming it (its owner, other
// imports) is left naming none, so later verbs on them fail with EINVAL
// instead of touching freed memory.  The caller destroyed `emu`; `self`
// is the struct it was destroyed through (untracked and freed by the caller
// unless it is the owner, which stays until its own destroy or the close).
void forget_shared_pd(ibv_context* ctx, ProtectionDomain* emu, Pd* self);
void forget_shared_mr(ibv_context* ctx, MemoryRegion* emu, Mr* self);
// Destroy verbs on an imported view (import.cpp); dealloc_pd / dereg_mr
// forward to them.
int dealloc_imported_pd(Pd* pd);
int dereg_imported_mr(Mr* mr);
inline Mw* to_mw(ibv_mw* m) { return reinterpret_cast<Mw*>(m); }
// The emulator's form of a bind WR's ibv_send_wr.bind_mw (mw.cpp); also for
// ibv_qp_ex's wr_bind_mw.  A NULL mw is left for the emulator to refuse.
MwBind to_emu_bind(ibv_mw* mw, uint32_t rkey, const ibv_mw_bind_info& info);
inline Cq* to_cq(ibv_cq* c) { return reinterpret_cast<Cq*>(c); }

// A CQ with its emulator side and channel hook-up (cq.cpp); errno set on failure.
Cq* make_cq(ibv_context* ctx, int cqe, ibv_comp_channel* channel, int comp_vector);
inline Srq* to_srq(ibv_srq* s) { return reinterpret_cast<Srq*>(s); }
inline Qp* to_qp(ibv_qp* q) { return reinterpret_cast<Qp*>(q); }

// Serialises async event routing against object destruction and context
// close (context_objects.cpp).
std::mutex& routing_lock();

// Destroys an emulator object that may raise async events: unlinked from
// its provider struct first (under the routing lock), so an event racing
// with the destroy finds no owner instead of a freed struct; relinked if
// the emulator refuses (EBUSY, left in errno as well).
template <typename EmuObject, typename Provider, typename Destroy>
inline int detach_and_destroy(EmuObject* obj, Provider* mine, Destroy destroy)
{
    {
        std::lock_guard lock(routing_lock());
        obj->user_context = nullptr;
    }
    int err = destroy(obj);
    if (err) {
        std::lock_guard lock(routing_lock());
        obj->user_context = mine;
        return fail_status(err);
    }
    return 0;
}

// Receive WRs go to the emulator in stack batches: no allocation on the
// data path.  *bad names the first WR not posted.
template <typename PostFn>
inline int post_recv_chain(ibv_recv_wr* wr, ibv_recv_wr** bad, PostFn post)
{
    constexpr size_t kBatch = 32;
    StackBatch<RecvWr, kBatch> storage;
    RecvWr* const batch = storage.items;
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

}  // namespace iwemu::provider
