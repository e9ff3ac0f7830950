// The extended post API of an RC QP: ibv_create_qp_ex with
// IBV_QP_INIT_ATTR_SEND_OPS_FLAGS, then ibv_wr_start, the WR builders
// (ibv_wr_send, ibv_wr_rdma_write, ...) each followed by a data setter
// (ibv_wr_set_sge, ibv_wr_set_inline_data, ...), and ibv_wr_complete or
// ibv_wr_abort.  Builders fill iwemu::SendWr entries in a per-QP array sized
// to max_send_wr; ibv_wr_complete hands them to the emulator in one call,
// the one ibv_post_send uses, all of them or none.  The builders return
// nothing (the API's design): the first error is kept and ibv_wr_complete
// returns it, posting nothing.
#include <endian.h>
#include <sched.h>
#include <sys/mman.h>

#include <atomic>
#include <cstring>
#include <mutex>
#include <type_traits>

#include "provider/abi_guard.h"
#include "provider/objects.h"

namespace iwemu::provider {

// The lock of the critical region ibv_wr_start .. ibv_wr_complete/abort
// (ibv_wr_post(3)): uncontended one exchange and one store.  A waiter spins
// briefly, then yields: the holder may be descheduled inside its region.
class RegionLock {
public:
    void lock() noexcept
    {
        for (unsigned spins = 0; held_.exchange(true, std::memory_order_acquire);)
            while (held_.load(std::memory_order_relaxed))
                if (++spins % 64 == 0) sched_yield();
    }
    void unlock() noexcept { held_.store(false, std::memory_order_release); }

private:
    std::atomic<bool> held_{false};
};

// Per-QP staging.  The arrays are mmap'ed: a QP with a deep SQ pays only for
// the pages its batches touch.
struct QpEx {
    RegionLock lock;
    SendWr* wrs = nullptr;    // [max_wr]
    Sge* sges = nullptr;      // [max_wr * max_sge]: WR i's SGEs from i * max_sge
    uint8_t* inl = nullptr;   // [max_wr * max_inline]: WR i's inline data
    size_t map_len = 0;
    uint32_t max_wr = 0, max_sge = 0, max_inline = 0;
    uint32_t n = 0;           // WRs built since ibv_wr_start
    SendWr* cur = nullptr;    // the WR the setters apply to; nullptr after a failed builder
    int err = 0;              // first error since ibv_wr_start
};

namespace {

// What an iWARP RC QP of this device can post.  Send with Immediate has no
// RFC 7306 form (docs/limits.md), TSO and Atomic Write are InfiniBand/mlx5
// operations; atomics and memory windows exactly when the device reports them.
uint64_t supported_send_ops()
{
    const DeviceAttributes& dev = emu().device_attributes();
    uint64_t ops = IBV_QP_EX_WITH_RDMA_WRITE | IBV_QP_EX_WITH_SEND | IBV_QP_EX_WITH_RDMA_READ |
                   IBV_QP_EX_WITH_LOCAL_INV | IBV_QP_EX_WITH_SEND_WITH_INV;
    if (emu().config().rfc7306) ops |= IBV_QP_EX_WITH_RDMA_WRITE_WITH_IMM;
    if (dev.atomic_cap != 0) ops |= IBV_QP_EX_WITH_ATOMIC_CMP_AND_SWP | IBV_QP_EX_WITH_ATOMIC_FETCH_AND_ADD;
    if (dev.max_mw != 0) ops |= IBV_QP_EX_WITH_BIND_MW;
    return ops;
}

inline Qp* of(ibv_qp_ex* q) { return reinterpret_cast<Qp*>(q); }  // qp_ex heads verbs_qp, which heads Qp

inline void set_err(QpEx* x, int err)
{
    if (!x->err) x->err = err;
    x->cur = nullptr;
}

// Starts the next WR: wr_id and wr_flags as the application set them before
// the builder.  nullptr (error kept) when the batch already holds max_send_wr.
SendWr* build(ibv_qp_ex* q, WrOpcode op)
{
    QpEx* x = of(q)->ex;
    if (x->n == x->max_wr) {
        set_err(x, ENOMEM);  // as a post to a full SQ
        return nullptr;
    }
    SendWr* w = &x->wrs[x->n++];
    *w = SendWr{};
    w->wr_id = q->wr_id;
    w->opcode = op;
    w->send_flags = q->wr_flags;
    x->cur = w;
    return w;
}

void wr_send(ibv_qp_ex* q) { build(q, WrOpcode::send); }

// Never granted today (supported_send_ops); the emulator refuses the opcode too.
void wr_send_imm(ibv_qp_ex* q, __be32 imm_data)
{
    if (SendWr* w = build(q, WrOpcode::send_with_imm)) w->imm_data = be32toh(imm_data);
}

void wr_send_inv(ibv_qp_ex* q, uint32_t invalidate_rkey)
{
    if (SendWr* w = build(q, WrOpcode::send_with_inv)) w->invalidate_rkey = invalidate_rkey;
}

void wr_rdma_write(ibv_qp_ex* q, uint32_t rkey, uint64_t remote_addr)
{
    if (SendWr* w = build(q, WrOpcode::rdma_write)) {
        w->rkey = rkey;
        w->remote_addr = remote_addr;
    }
}

void wr_rdma_write_imm(ibv_qp_ex* q, uint32_t rkey, uint64_t remote_addr, __be32 imm_data)
{
    if (SendWr* w = build(q, WrOpcode::rdma_write_with_imm)) {
        w->rkey = rkey;
        w->remote_addr = remote_addr;
        w->imm_data = be32toh(imm_data);
    }
}

void wr_rdma_read(ibv_qp_ex* q, uint32_t rkey, uint64_t remote_addr)
{
    if (SendWr* w = build(q, WrOpcode::rdma_read)) {
        w->rkey = rkey;
        w->remote_addr = remote_addr;
    }
}

void wr_atomic_cmp_swp(ibv_qp_ex* q, uint32_t rkey, uint64_t remote_addr, uint64_t compare, uint64_t swap)
{
    if (SendWr* w = build(q, WrOpcode::atomic_cmp_and_swp)) {
        w->rkey = rkey;
        w->remote_addr = remote_addr;
        w->compare_add = compare;
        w->swap = swap;
    }
}

void wr_atomic_fetch_add(ibv_qp_ex* q, uint32_t rkey, uint64_t remote_addr, uint64_t add)
{
    if (SendWr* w = build(q, WrOpcode::atomic_fetch_and_add)) {
        w->rkey = rkey;
        w->remote_addr = remote_addr;
        w->compare_add = add;
    }
}

// A type 2 window only (ibv_wr_post(3)); a range needs its MR, as ibv_bind_mw checks.
void wr_bind_mw(ibv_qp_ex* q, ibv_mw* mw, uint32_t rkey, const ibv_mw_bind_info* info)
{
    SendWr* w = build(q, WrOpcode::bind_mw);
    if (!w) return;
    if (!mw || mw->type != IBV_MW_TYPE_2 || !info || (!info->mr && (info->addr || info->length))) {
        set_err(of(q)->ex, EINVAL);
        return;
    }
    w->bind = to_emu_bind(mw, rkey, *info);  // the window by pointer: its STag changes with each bind
    of(q)->ex->cur = nullptr;  // no data setter applies
}

void wr_local_inv(ibv_qp_ex* q, uint32_t invalidate_rkey)
{
    if (SendWr* w = build(q, WrOpcode::local_inv)) {
        w->invalidate_rkey = invalidate_rkey;
        of(q)->ex->cur = nullptr;  // no data setter applies
    }
}

// A builder the QP was not created with (not in send_ops_flags, or one the
// device lacks): the batch fails with EOPNOTSUPP.  Installed instead of NULL
// because libibverbs calls the pointer unchecked.
template <typename... Args>
void refused(ibv_qp_ex* q, Args...)
{
    set_err(of(q)->ex, EOPNOTSUPP);
}

// UD and XRC addressing mean nothing on an RC QP.
template <typename... Args>
void wrong_qp_type(ibv_qp_ex* q, Args...)
{
    set_err(of(q)->ex, EINVAL);
}

// The WR a data setter applies to: built, and not a local operation.
SendWr* data_target(ibv_qp_ex* q)
{
    QpEx* x = of(q)->ex;
    if (!x->cur) set_err(x, EINVAL);  // no builder before it, or the builder failed (error already kept)
    return x->cur;
}

inline size_t index_of(const QpEx* x, const SendWr* w) { return static_cast<size_t>(w - x->wrs); }

void wr_set_sge(ibv_qp_ex* q, uint32_t lkey, uint64_t addr, uint32_t length)
{
    SendWr* w = data_target(q);
    if (!w) return;
    QpEx* x = of(q)->ex;
    Sge* s = &x->sges[index_of(x, w) * x->max_sge];
    *s = Sge{addr, length, lkey};
    w->sg_list = s;
    w->num_sge = length ? 1 : 0;  // zero octets: no buffer, as with an empty SGE list
}

void wr_set_sge_list(ibv_qp_ex* q, size_t num_sge, const ibv_sge* sg_list)
{
    SendWr* w = data_target(q);
    if (!w) return;
    QpEx* x = of(q)->ex;
    if (num_sge > x->max_sge || (num_sge && !sg_list)) {
        set_err(x, EINVAL);  // as ibv_post_send with too many SGEs
        return;
    }
    Sge* s = &x->sges[index_of(x, w) * x->max_sge];
    for (size_t i = 0; i < num_sge; ++i)  // the caller may reuse its list at once
        s[i] = Sge{sg_list[i].addr, sg_list[i].length, sg_list[i].lkey};
    w->sg_list = s;
    w->num_sge = static_cast<uint32_t>(num_sge);
}

// Inline data is copied here: the caller may reuse its buffers as soon as
// the setter returns (ibv_wr_post(3)).  Send and RDMA Write only.
uint8_t* inline_target(ibv_qp_ex* q, size_t total, SendWr** out)
{
    SendWr* w = data_target(q);
    if (!w) return nullptr;
    QpEx* x = of(q)->ex;
    const bool carries = w->opcode == WrOpcode::send || w->opcode == WrOpcode::send_with_inv ||
                         w->opcode == WrOpcode::send_with_imm || w->opcode == WrOpcode::rdma_write ||
                         w->opcode == WrOpcode::rdma_write_with_imm;
    if (!carries || total > x->max_inline) {
        set_err(x, EINVAL);  // as ibv_post_send with IBV_SEND_INLINE beyond the limit
        return nullptr;
    }
    *out = w;
    return &x->inl[index_of(x, w) * x->max_inline];
}

void finish_inline(QpEx* x, SendWr* w, uint8_t* data, size_t total)
{
    Sge* s = &x->sges[index_of(x, w) * x->max_sge];
    *s = Sge{reinterpret_cast<uint64_t>(data), static_cast<uint32_t>(total), 0};
    w->sg_list = s;
    w->num_sge = total ? 1 : 0;
    w->send_flags |= send_inline;
}

void wr_set_inline_data(ibv_qp_ex* q, void* addr, size_t length)
{
    SendWr* w = nullptr;
    uint8_t* data = inline_target(q, length, &w);
    if (!data) return;
    if (length) std::memcpy(data, addr, length);
    finish_inline(of(q)->ex, w, data, length);
}

void wr_set_inline_data_list(ibv_qp_ex* q, size_t num_buf, const ibv_data_buf* bufs)
{
    size_t total = 0;
    for (size_t i = 0; i < num_buf; ++i) {
        total += bufs[i].length;
        if (total < bufs[i].length) total = SIZE_MAX;  // wrapped: far beyond any limit
    }
    SendWr* w = nullptr;
    uint8_t* data = inline_target(q, total, &w);
    if (!data) return;
    size_t off = 0;
    for (size_t i = 0; i < num_buf; ++i) {
        if (bufs[i].length) std::memcpy(data + off, bufs[i].addr, bufs[i].length);
        off += bufs[i].length;
    }
    finish_inline(of(q)->ex, w, data, total);
}

void wr_start(ibv_qp_ex* q)
{
    QpEx* x = of(q)->ex;
    x->lock.lock();
    x->n = 0;
    x->cur = nullptr;
    x->err = 0;
}

// Posts the batch whole or not at all; returns the error a builder or
// setter kept, or the errno ibv_post_send would give for it.
int wr_complete(ibv_qp_ex* q)
{
    Qp* qp = of(q);
    QpEx* x = qp->ex;
    std::unique_lock<RegionLock> region(x->lock, std::adopt_lock);  // released however this ends
    const uint32_t n = x->n;
    x->n = 0;
    x->cur = nullptr;
    if (x->err || !n) return x->err;
    size_t bad = 0;
    return qp->emu->post_send(x->wrs, n, &bad, true);
}

void wr_abort(ibv_qp_ex* q)
{
    QpEx* x = of(q)->ex;
    x->n = 0;
    x->cur = nullptr;
    x->lock.unlock();
}

}  // namespace

int check_send_ops(uint64_t send_ops_flags)
{
    return (send_ops_flags & ~supported_send_ops()) ? EOPNOTSUPP : 0;
}

int attach_qp_ex(Qp* qp, uint64_t ops, const ibv_qp_cap& granted)
{
    auto* x = new (std::nothrow) QpEx;
    if (!x) return ENOMEM;
    x->max_wr = granted.max_send_wr;
    x->max_sge = granted.max_send_sge ? granted.max_send_sge : 1;  // inline data needs one
    x->max_inline = granted.max_inline_data;
    const size_t wrs = size_t{x->max_wr} * sizeof(SendWr);
    const size_t sges = size_t{x->max_wr} * x->max_sge * sizeof(Sge);
    const size_t inl = size_t{x->max_wr} * x->max_inline;
    x->map_len = wrs + sges + inl;
    void* p = mmap(nullptr, x->map_len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) {
        delete x;
        return ENOMEM;
    }
    // SendWr and Sge are implicit-lifetime types: the mapping holds them.
    x->wrs = static_cast<SendWr*>(p);
    x->sges = reinterpret_cast<Sge*>(static_cast<char*>(p) + wrs);
    x->inl = reinterpret_cast<uint8_t*>(static_cast<char*>(p) + wrs + sges);
    qp->ex = x;

    ibv_qp_ex& q = qp->vqp.qp_ex;
    q.comp_mask = 0;
    q.wr_id = 0;
    q.wr_flags = 0;
    auto pick = [ops](uint64_t flag, auto fn, auto* slot) {
        using Fn = std::remove_pointer_t<decltype(slot)>;
        *slot = (ops & flag) ? static_cast<Fn>(fn) : static_cast<Fn>(refused);
    };
    pick(IBV_QP_EX_WITH_SEND, wr_send, &q.wr_send);
    pick(IBV_QP_EX_WITH_SEND_WITH_IMM, wr_send_imm, &q.wr_send_imm);
    pick(IBV_QP_EX_WITH_SEND_WITH_INV, wr_send_inv, &q.wr_send_inv);
    pick(IBV_QP_EX_WITH_RDMA_WRITE, wr_rdma_write, &q.wr_rdma_write);
    pick(IBV_QP_EX_WITH_RDMA_WRITE_WITH_IMM, wr_rdma_write_imm, &q.wr_rdma_write_imm);
    pick(IBV_QP_EX_WITH_RDMA_READ, wr_rdma_read, &q.wr_rdma_read);
    pick(IBV_QP_EX_WITH_ATOMIC_CMP_AND_SWP, wr_atomic_cmp_swp, &q.wr_atomic_cmp_swp);
    pick(IBV_QP_EX_WITH_ATOMIC_FETCH_AND_ADD, wr_atomic_fetch_add, &q.wr_atomic_fetch_add);
    pick(IBV_QP_EX_WITH_BIND_MW, wr_bind_mw, &q.wr_bind_mw);
    pick(IBV_QP_EX_WITH_LOCAL_INV, wr_local_inv, &q.wr_local_inv);
    // Never granted (check_send_ops): EOPNOTSUPP if called all the same.
    q.wr_send_tso = refused;
    q.wr_atomic_write = refused;
    q.wr_set_ud_addr = wrong_qp_type;
    q.wr_set_xrc_srqn = wrong_qp_type;
    q.wr_set_sge = wr_set_sge;
    q.wr_set_sge_list = wr_set_sge_list;
    q.wr_set_inline_data = wr_set_inline_data;
    q.wr_set_inline_data_list = wr_set_inline_data_list;
    q.wr_start = wr_start;
    q.wr_complete = Guard<wr_complete>::call;
    q.wr_abort = wr_abort;
    qp->vqp.comp_mask |= VERBS_QP_EX;  // ibv_qp_to_qp_ex() now returns &qp_ex
    return 0;
}

void free_qp_ex(Qp* qp)
{
    QpEx* x = qp->ex;
    if (!x) return;
    munmap(x->wrs, x->map_len);
    delete x;
    qp->ex = nullptr;
}

}  // namespace iwemu::provider
