#include "emulator/cq.h"

#include <sched.h>

#include <algorithm>
#include <chrono>

#include "emulator/emulator.h"
#include "emulator/qp/qp.h"

namespace iwemu {

CompletionQueue::CompletionQueue(Emulator& emu, uint32_t capacity)
    : emu_(emu), capacity_(capacity), ring_(capacity)
{
}

int CompletionQueue::resize(uint32_t cqe)
{
    if (cqe == 0 || cqe > limits::max_cqe) return EINVAL;
    std::lock_guard<std::mutex> g(lock_);
    if (cqe < count_) return EINVAL;  // as rxe: never drops a completion
    std::vector<Completion> ring(cqe);
    for (uint32_t i = 0; i < count_; ++i) ring[i] = ring_[(head_ + i) % capacity_];
    ring_.swap(ring);
    if (!stamps_.empty()) {
        std::vector<uint64_t> stamps(cqe);
        for (uint32_t i = 0; i < count_; ++i) stamps[i] = stamps_[(head_ + i) % capacity_];
        stamps_.swap(stamps);
    }
    head_ = 0;
    capacity_ = cqe;
    return 0;
}

void CompletionQueue::stamp_completions()
{
    std::lock_guard<std::mutex> g(lock_);
    stamps_.assign(capacity_, 0);
}

int CompletionQueue::poll(Completion* out, int max, uint64_t* stamps)
{
    emu_.note_app_call();
    if (max <= 0) return 0;
    // Racy increment on purpose: the lease only asks whether it moved.
    poll_calls_.store(poll_calls_.load(std::memory_order_relaxed) + 1, std::memory_order_relaxed);
    for (int pass = 0; pass < 2; ++pass) {
        if (published_.load(std::memory_order_acquire) > 0) {
            std::unique_lock<std::mutex> g(lock_);
            if (count_ > 0) {
                const int n = static_cast<int>(std::min<uint32_t>(count_, static_cast<uint32_t>(max)));
                for (int i = 0; i < n; ++i) {
                    out[i] = ring_[head_];
                    if (stamps && !stamps_.empty()) stamps[i] = stamps_[head_];
                    head_ = head_ + 1 == capacity_ ? 0 : head_ + 1;
                }
                count_ -= static_cast<uint32_t>(n);
                published_.store(count_, std::memory_order_release);
                g.unlock();
                if (__builtin_expect(local_peers_.load(std::memory_order_relaxed), 0)) place_local_writes(out, n);
                // A poller that owns the receive path keeps it: it comes back
                // for the next completion (the lease notices if it does not).
                return n;
            }
        }
        if (pass == 1 || !emu_.config().rx_progress_on_poll) break;
        // Empty: run the receive path here, in the polling thread, instead
        // of waiting for the engine thread to wake up.
        const int64_t now = now_ns();
        const bool own = emu_.config().poll_owns_rx && !armed() && busy_polling(now);
        auto drive = [now](QueuePair* qp) {
            qp->try_tx_progress();
            if (qp->poll_rx_wanted(now)) qp->try_rx_progress();
        };
        auto take = [this, now](QueuePair* qp) {
            if (published_.load(std::memory_order_acquire) == 0) qp->poll_take_rx(now);
        };
        if (emu_.visit_few_qps(drive)) {
            // ... still nothing: a poller that keeps polling owns the receive
            // path (no engine wake-up per arriving FPDU).
            if (own && emu_.visit_few_qps(take)) owns_rx_.store(true, std::memory_order_relaxed);
        } else {
            // A CQ shared by many QPs visits only a few of them per miss, round
            // robin: the engine thread serves every readable socket anyway, and
            // a read() per QP per empty poll made a miss on a CQ of 1,000 QPs
            // cost milliseconds.  Such a CQ never takes the receive path over.
            std::shared_lock<std::shared_mutex> g(qps_lock_, std::try_to_lock);
            if (!g.owns_lock()) break;
            const size_t nqps = qps_.size();
            const size_t visit = std::min(nqps, poll_progress_qps);
            const size_t first =
                nqps > poll_progress_qps ? progress_cursor_.fetch_add(visit, std::memory_order_relaxed) : 0;
            for (size_t k = 0; k < visit; ++k) drive(qps_[(first + k) % nqps]);
            if (own && nqps <= poll_progress_qps) {
                for (QueuePair* qp : qps_) take(qp);
                owns_rx_.store(true, std::memory_order_relaxed);
            }
        }
        // Give the CPU to a runnable engine thread (busy-polling applications
        // on small machines would otherwise starve it), unless this poller
        // receives itself: then the engine has nothing urgent, and the
        // system call would only delay noticing the next message.
        if (published_.load(std::memory_order_acquire) == 0 && !owns_rx_.load(std::memory_order_relaxed))
            sched_yield();
    }
    return 0;
}

// Write completions about to be returned whose target QP is in this
// process: its receive path places them first (local_peer.cpp).  The
// targets were recorded before the completions were pushed.
void CompletionQueue::place_local_writes(const Completion* c, int n)
{
    bool writes = false;
    for (int i = 0; i < n && !writes; ++i) writes = c[i].opcode == WcOpcode::rdma_write;
    if (!writes) return;
    std::shared_lock<std::shared_mutex> g(qps_lock_);
    for (QueuePair* qp : qps_)
        if (qp->local_writes_pending()) qp->local_writes_place();
}

// Two empty polls close together: the thread spins on this CQ.  A thread
// that polls now and then (between sleeps, once per frame) leaves the
// receive path to the engine: what arrives in between, RDMA Writes and Read
// Requests included, must not wait for its next poll or the lease tick.
bool CompletionQueue::busy_polling(int64_t now)
{
    // Load and store, not exchange (a locked instruction on every empty
    // poll): concurrent pollers of one CQ may each see the other's time.
    const int64_t prev = last_empty_poll_ns_.load(std::memory_order_relaxed);
    last_empty_poll_ns_.store(now, std::memory_order_relaxed);
    return now - prev <= busy_poll_gap_ns;
}

bool CompletionQueue::lends_rx(int64_t now) const
{
    return !armed() && now >= no_take_until_ns_.load(std::memory_order_relaxed);
}

void CompletionQueue::note_lease_lapse()
{
    no_take_until_ns_.store(now_ns() + lapse_backoff_ns, std::memory_order_relaxed);
}

int64_t CompletionQueue::now_ns()
{
    return std::chrono::duration_cast<std::chrono::nanoseconds>(
               std::chrono::steady_clock::now().time_since_epoch())
        .count();
}

int CompletionQueue::req_notify(bool solicited_only)
{
    {
        std::lock_guard<std::mutex> g(lock_);
        // "next" is stronger than "solicited": keep it if already armed so.
        if (arm_ != Arm::next) arm_ = solicited_only ? Arm::solicited : Arm::next;
        armed_.store(true, std::memory_order_relaxed);
    }
    // The application is about to sleep: the engine thread must receive for
    // every QP feeding this CQ, whichever CQ's poll took it over.  The poll
    // that usually follows the arm (to close the race with a completion that
    // came before it) cannot take it back while armed_ holds.
    owns_rx_.store(false, std::memory_order_relaxed);
    std::shared_lock<std::shared_mutex> g(qps_lock_);
    for (QueuePair* qp : qps_) qp->poll_return_rx();
    return 0;
}

void CompletionQueue::set_event_handler(std::function<void()> handler, int channel_fd, uint64_t record)
{
    auto h = handler ? std::make_shared<const std::function<void()>>(std::move(handler)) : nullptr;
    std::lock_guard<std::mutex> g(lock_);
    handler_ = std::move(h);
    event_record_ = record;
    event_channel_.store(handler_ ? channel_fd : -1, std::memory_order_relaxed);
}

namespace {
// The waiting thread's channel (rx_event_waiter.cpp) and the event it produced.
thread_local int t_awaited_channel = -1;
thread_local bool t_awaited_fired = false;
thread_local uint64_t t_awaited_record = 0;
}  // namespace

void CompletionQueue::await_channel(int channel_fd)
{
    t_awaited_channel = channel_fd;
    t_awaited_fired = false;
}

bool CompletionQueue::awaited_event(uint64_t* record)
{
    if (!t_awaited_fired) return false;
    *record = t_awaited_record;
    return true;
}

uint32_t CompletionQueue::size() const
{
    std::lock_guard<std::mutex> g(lock_);
    return count_;
}

bool CompletionQueue::overflowed() const
{
    std::lock_guard<std::mutex> g(lock_);
    return overflow_;
}

bool CompletionQueue::push(const Completion& c, bool solicited)
{
    std::shared_ptr<const std::function<void()>> notify;
    bool report_overflow = false;
    bool accepted = false;
    {
        std::lock_guard<std::mutex> g(lock_);
        if (count_ == capacity_ || overflow_) {
            if (!overflow_) report_overflow = true;
            overflow_ = true;
        } else {
            uint32_t tail = head_ + count_;
            if (tail >= capacity_) tail -= capacity_;
            ring_[tail] = c;
            if (!stamps_.empty()) stamps_[tail] = static_cast<uint64_t>(now_ns());
            ++count_;
            published_.store(count_, std::memory_order_release);
            accepted = true;
            // IB semantics: a solicited-only arm also fires on error completions.
            const bool matches = arm_ == Arm::next ||
                                 (arm_ == Arm::solicited && (solicited || c.status != WcStatus::success));
            if (matches) {
                arm_ = Arm::none;
                armed_.store(false, std::memory_order_relaxed);
                if (handler_) {
                    // The thread waiting on this channel produced it: hand it
                    // over directly, not through the channel (two system calls).
                    if (t_awaited_channel >= 0 && !t_awaited_fired &&
                        event_channel_.load(std::memory_order_relaxed) == t_awaited_channel) {
                        t_awaited_fired = true;
                        t_awaited_record = event_record_;
                    } else {
                        notify = handler_;
                    }
                }
            }
        }
    }
    if (report_overflow) {
        AsyncEvent ev;
        ev.type = AsyncEventType::cq_err;
        ev.cq = this;
        emu_.post_async_event(ev);
    }
    if (notify) (*notify)();
    return accepted;
}

void CompletionQueue::attach_qp(QueuePair* qp)
{
    std::unique_lock<std::shared_mutex> g(qps_lock_);
    qps_.push_back(qp);
}

void CompletionQueue::detach_qp(QueuePair* qp)
{
    std::unique_lock<std::shared_mutex> g(qps_lock_);
    auto it = std::find(qps_.begin(), qps_.end(), qp);
    if (it != qps_.end()) qps_.erase(it);
}

uint32_t CompletionQueue::attached_qps() const
{
    std::shared_lock<std::shared_mutex> g(qps_lock_);
    return static_cast<uint32_t>(qps_.size());
}

}  // namespace iwemu
