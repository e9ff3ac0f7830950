// Memory Windows (RFC 5040 §2.1 "STag", IBA 10.6.7): their STags in the
// table and the Bind Memory Window work request.
//
// Association.  A window is used only by a stream of its PD (RFC 5040 §6.4:
// an STag is associated with a PD or with a stream); a type 2 window only by
// the stream (QP) that bound it -- the IBA "type 2B" flavour (QP and PD
// checked, as rxe), what iwemu reports (IBV_DEVICE_MEM_WINDOW_TYPE_2B).  A
// type 1 window is bound by ibv_bind_mw and unbound by binding it with no
// length; Local Invalidate and Send with Invalidate take type 2 windows only
// (IBA o10-37.2.26).  A remote invalidation must come over the window's own
// stream; a Local Invalidate may come from any QP of the PD (as rxe).
//
// Entry states: free (no window), invalid (allocated, unbound or
// invalidated), valid (bound).  Every change of a window entry happens under
// window_lock_; acquire() reads an entry only while it pins it (the same
// pin-then-check protocol as for regions), and a bind waits for those pins
// -- held for a few instructions, never across I/O -- before it rewrites the
// entry.  The region a window names cannot be deregistered or reregistered
// while the window is bound (EINVAL, IBA 10.6.7.2.6, rxe); acquire() checks
// the region's state and key once more after pinning it, so a window
// invalidated meanwhile never reaches a region that changed.
#include <cerrno>
#include <cstring>
#include <thread>

#include "emulator/emulator.h"
#include "emulator/base/log.h"
#include "emulator/pd.h"
#include "emulator/qp/qp.h"
#include "emulator/stag_table.h"

namespace iwemu {

namespace {
constexpr uint32_t remote_rights = access_remote_read | access_remote_write | access_remote_atomic;
}

int StagTable::allocate_window(ProtectionDomain* pd, MwType type, MemoryWindow** out)
{
    if (type != MwType::type1 && type != MwType::type2) return EINVAL;
    std::lock_guard<std::mutex> w(window_lock_);
    std::lock_guard<std::mutex> g(alloc_lock_);
    if (live_windows_.load(std::memory_order_relaxed) >= max_windows_) return ENOMEM;
    MemoryRegion* e;
    if (int err = allocate_slot(&e)) return err;
    auto* mw = new (std::nothrow) MemoryWindow(e, type, pd);
    if (!mw) {
        free_indexes_.push_back(e->stag_ >> 8);
        return ENOMEM;
    }
    e->window_ = static_cast<uint8_t>(type);
    e->pd_ = pd;
    e->host_ = nullptr;
    e->iova_ = e->length_ = 0;
    e->access_ = 0;
    e->bound_ = nullptr;
    e->bound_stag_ = 0;
    e->stream_ = 0;
    e->windows_.store(0, std::memory_order_relaxed);
    e->users_.store(0, std::memory_order_relaxed);
    e->state_.store(MemoryRegion::State::invalid, std::memory_order_release);
    live_windows_.fetch_add(1, std::memory_order_relaxed);
    *out = mw;
    return 0;
}

// window_lock_ held: no tagged access through `w` after this returns.
void StagTable::quiesce_window(MemoryRegion* w, MemoryRegion::State to)
{
    w->state_.store(to, std::memory_order_seq_cst);
    // Pins on a window last only inside acquire(): a bounded wait.
    while (w->users_.load(std::memory_order_seq_cst) != 0) std::this_thread::yield();
}

// window_lock_ held.
void StagTable::unbind_locked(MemoryRegion* w)
{
    if (w->bound_) w->bound_->windows_.fetch_sub(1, std::memory_order_acq_rel);
    w->bound_ = nullptr;
    w->bound_stag_ = 0;
    w->stream_ = 0;
    w->access_ = 0;
    w->iova_ = w->length_ = 0;
}

void StagTable::free_window(MemoryWindow* mw)
{
    MemoryRegion* const w = mw->slot_;
    {
        std::lock_guard<std::mutex> l(window_lock_);
        quiesce_window(w, MemoryRegion::State::free);
        unbind_locked(w);
        std::lock_guard<std::mutex> g(alloc_lock_);
        free_indexes_.push_back(w->stag_ >> 8);
        live_windows_.fetch_sub(1, std::memory_order_relaxed);
    }
    delete mw;
}

int StagTable::bind_window(MemoryRegion* w, const MwBind& b, const ProtectionDomain* qp_pd, uint64_t stream)
{
    std::lock_guard<std::mutex> l(window_lock_);
    // The entry as it is now (state first: it orders the fields after it).
    const auto st = w->state_.load(std::memory_order_seq_cst);
    if (st == MemoryRegion::State::free || !w->window_) return EINVAL;  // window freed since the post
    if ((b.rkey >> 8) != (w->stag_ >> 8)) return EINVAL;                // the key is all a bind may change
    const bool type2 = w->window_ == static_cast<uint8_t>(MwType::type2);
    const bool unbind = !b.mr || b.length == 0;
    if (type2) {
        if (st == MemoryRegion::State::valid) return EINVAL;  // o10-37.2.30: a type 2 window binds when free
        if (unbind) return EINVAL;                            // o10-37.2.40: invalidated, not unbound by a bind
        if (qp_pd != w->pd_) return EPERM;                    // C10-72
    }
    if (b.access & access_zero_based) return EINVAL;  // windows address the region's Tagged Offsets
    if (unbind) {
        quiesce_window(w, MemoryRegion::State::invalid);
        unbind_locked(w);
        w->stag_ = b.rkey;
        return 0;
    }
    MemoryRegion* const mr = b.mr;
    // Under window_lock_ a valid region cannot be deregistered: its fields are stable.
    if (mr->state_.load(std::memory_order_seq_cst) != MemoryRegion::State::valid || mr->window_) return EINVAL;
    if (mr->pd_ != w->pd_) return EPERM;
    if (!(mr->access_ & access_mw_bind)) return EACCES;                       // C10-73
    const uint32_t rights = b.access & remote_rights;
    if ((rights & (access_remote_write | access_remote_atomic)) && !(mr->access_ & access_local_write))
        return EACCES;                                                        // C10-74
    if (b.addr + b.length < b.addr || !mr->contains(b.addr, b.length)) return EINVAL;  // C10-75
    quiesce_window(w, MemoryRegion::State::invalid);
    unbind_locked(w);
    w->stag_ = b.rkey;
    w->iova_ = b.addr;
    w->length_ = b.length;
    w->access_ = rights;
    w->bound_ = mr;
    w->bound_stag_ = mr->stag_;
    w->stream_ = type2 ? stream : 0;
    mr->windows_.fetch_add(1, std::memory_order_acq_rel);
    w->state_.store(MemoryRegion::State::valid, std::memory_order_release);
    return 0;
}

// `w` is pinned by acquire(), valid, with the key asked for.  Returns the
// bound region pinned instead, or nullptr with the reason.
MemoryRegion* StagTable::acquire_window(MemoryRegion* w, const ProtectionDomain* pd, uint32_t access, uint64_t to,
                                        uint64_t len, StagError* error, uint64_t stream)
{
    StagError e = StagError::none;
    MemoryRegion* mr = nullptr;
    if (!(access & remote_rights))
        e = StagError::invalid_stag;  // a window is no local key (lkey)
    else if (w->pd_ != pd || (w->stream_ && w->stream_ != stream))
        e = StagError::pd_mismatch;   // RFC 5041 §7.2: STag not associated with the stream
    else if ((w->access_ & access) != access)
        e = StagError::access;
    else if (len > 0 && to + len < to)
        e = StagError::to_wrap;
    else if (len > 0 && !w->contains(to, len))
        e = StagError::bounds;
    else {
        mr = w->bound_;
        mr->users_.fetch_add(1, std::memory_order_seq_cst);
        // The region as bound: a deregistration or reregistration after the
        // window was invalidated shows here, and its memory is not touched.
        if (mr->state_.load(std::memory_order_seq_cst) != MemoryRegion::State::valid ||
            mr->stag_ != w->bound_stag_ || (len > 0 && !mr->contains(to, len))) {
            mr->users_.fetch_sub(1, std::memory_order_release);
            mr = nullptr;
            e = StagError::invalid_stag;
        }
    }
    w->users_.fetch_sub(1, std::memory_order_release);
    *error = e;
    return mr;
}

StagError StagTable::invalidate_window(MemoryRegion* w, uint32_t stag, const ProtectionDomain* pd,
                                       uint64_t remote_stream)
{
    std::lock_guard<std::mutex> l(window_lock_);
    // Everything once more under the lock: the entry may have changed since invalidate() looked.
    if (w->state_.load(std::memory_order_seq_cst) != MemoryRegion::State::valid || !w->window_ ||
        w->stag_ != stag)
        return StagError::invalid_stag;
    if (w->window_ != static_cast<uint8_t>(MwType::type2)) return StagError::invalid_stag;  // o10-37.2.26
    if (w->pd_ != pd || (remote_stream && w->stream_ != remote_stream)) return StagError::pd_mismatch;
    quiesce_window(w, MemoryRegion::State::invalid);
    unbind_locked(w);
    return StagError::none;
}

// ---- the QP side: Bind Memory Window work requests ----

namespace {
// What a bind WQE keeps, in the WQE's inline buffer (a bind carries no
// data; every send WQE holds limits::max_inline_data octets).
struct QueuedBind {
    MemoryRegion* window;
    MwBind bind;
};
static_assert(sizeof(QueuedBind) <= limits::max_inline_data);
}  // namespace

int QueuePair::check_bind_post(const SendWr& wr, QpState st) const
{
    // rxe: a bind is posted on a QP in RTS only (ERROR flushes it, as any WR).
    if (st != QpState::rts && st != QpState::err && st != QpState::sqe) return EINVAL;
    if (!wr.bind.mw || wr.num_sge != 0 || tx_.max_inline < sizeof(QueuedBind)) return EINVAL;
    return 0;
}

void QueuePair::queue_bind(SendWqe& w, const MwBind& bind)
{
    const QueuedBind q{bind.mw->entry(), bind};
    std::memcpy(w.inline_buf, &q, sizeof q);
}

bool QueuePair::tx_bind_mw_locked(SendWqe& w)
{
    QueuedBind q;
    std::memcpy(&q, w.inline_buf, sizeof q);
    if (int err = emu_.stags().bind_window(q.window, q.bind, pd_, stream_id_)) {
        // IBA / rxe: a failed bind completes in error and the QP goes to ERROR.
        IWEMU_LOG(info, "qp %u: bind of memory window 0x%08x failed (%s)", qp_num_, q.bind.rkey,
                  std::strerror(err));
        tx_local_error_locked(w, WcStatus::mw_bind_err);
        return true;
    }
    w.phase = WqePhase::done;
    ++tx_.sq_tx;
    sq_complete_in_order_locked();
    return true;
}

uint64_t QueuePair::next_stream_id()
{
    static std::atomic<uint64_t> next{1};
    return next.fetch_add(1, std::memory_order_relaxed);
}

}  // namespace iwemu
