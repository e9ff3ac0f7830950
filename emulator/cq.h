// Completion Queue: a preallocated ring of Completions, overflow detection
// (async CQ error, RFC 5040 §8.1.1: a CQ overflow never touches other CQs),
// notification arming (next / solicited) and a completion-channel hook.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <shared_mutex>
#include <vector>

#include "emulator/verbs_types.h"

namespace iwemu {

class Emulator;

class CompletionQueue {
public:
    CompletionQueue(Emulator& emu, uint32_t capacity);
    CompletionQueue(const CompletionQueue&) = delete;
    CompletionQueue& operator=(const CompletionQueue&) = delete;

    // ibv_poll_cq: up to `max` completions, oldest first; returns the count,
    // or -EIO... never: an overflowed CQ still returns what it holds.  When
    // the CQ is empty it first drives the receive path of its QPs (so a
    // polling application needs no thread hand-off).
    // `stamps`: when the CQ stamps, receives each completion's time (now_ns()
    // when it was queued).
    int poll(Completion* out, int max, uint64_t* stamps = nullptr);

    // ibv_req_notify_cq: arm for the next completion (any), or for the next
    // solicited / error completion.  The handler then runs once.
    int req_notify(bool solicited_only);

    // Called (from an emulator thread or the completing thread, no emulator
    // lock held) when an armed CQ receives a matching completion.  The shim
    // or provider writes its completion channel from here.
    // `channel_fd`: the completion channel the handler posts to (its read
    // end, the fd the application waits on), or -1; `record`: the 8 octets
    // the handler writes there.
    void set_event_handler(std::function<void()> handler, int channel_fd = -1, uint64_t record = 0);
    int event_channel() const { return event_channel_.load(std::memory_order_relaxed); }
    // A thread waiting for an event of `channel_fd` (rx_event_waiter.cpp)
    // runs the receive path itself: await_channel() before; the first event
    // for that channel it then produces is not posted but kept for it, and
    // awaited_event() hands it over (false: none yet).
    static void await_channel(int channel_fd);
    static bool awaited_event(uint64_t* record);

    // Completions get the time they were queued: a CQ-ex asked for
    // completion timestamps (a ring of its own: other CQs' entries stay small).
    void stamp_completions();

    uint32_t capacity() const { return capacity_; }
    uint32_t size() const;
    bool overflowed() const;

    void* user_context = nullptr;  // free for the provider / shim

    // req_notify asked for an event that has not fired yet: the application
    // sleeps, or is about to, until the engine delivers one.  No poller may
    // take the receive path of this CQ's QPs then (rx_poll_owner.cpp).
    bool armed() const { return armed_.load(std::memory_order_relaxed); }
    // The engine's lease took the receive path back from a poller of this
    // CQ that had walked away (rx_poll_owner.cpp).
    void note_lease_lapse();
    // A poller may take the receive path of a QP feeding this CQ: not armed,
    // and no lease lapse lately.  `now`: the poller's clock (now_ns()).
    bool lends_rx(int64_t now) const;
    // poll() calls so far (any result): a poller that keeps finding
    // completions is still there (the lease, rx_poll_owner.cpp).
    uint64_t poll_calls() const { return poll_calls_.load(std::memory_order_relaxed); }
    static int64_t now_ns();

    // -- emulator internals ------------------------------------------------
    // Append one completion.  `solicited` marks a receive of a Send with SE.
    // Returns false when the CQ overflowed (the completion is lost, the CQ
    // and its QPs are reported with CQ_ERR once).
    bool push(const Completion& c, bool solicited);
    // ibv_resize_cq: a new capacity in 1..max_cqe that still holds every
    // queued completion (EINVAL otherwise); their order is kept.
    int resize(uint32_t cqe);
    // A QP sending from this CQ got a peer in this process: polls that
    // return its Write completions first see them placed (local_peer.cpp).
    void note_local_peer() { local_peers_.store(true, std::memory_order_relaxed); }
    void attach_qp(QueuePair* qp);
    void detach_qp(QueuePair* qp);
    uint32_t attached_qps() const;

private:
    enum class Arm : uint8_t { none, next, solicited };

    Emulator& emu_;
    uint32_t capacity_;  // lock_ (resize); poll() and push() read it under lock_
    std::vector<uint64_t> stamps_;  // lock_; parallel to ring_ when the CQ stamps, else empty
    mutable std::mutex lock_;
    std::vector<Completion> ring_;
    uint32_t head_ = 0;   // oldest
    uint32_t count_ = 0;
    // count_, published for an empty check without the lock: a busy-polling
    // application would otherwise contend with every push() from the engine
    // thread (futex sleep/wake per completion).  Written under lock_, so a
    // poll that follows req_notify (which takes lock_) never misses a push.
    std::atomic<uint32_t> published_{0};
    Arm arm_ = Arm::none;
    std::atomic<bool> armed_{false};  // arm_ != none, readable without lock_
    bool overflow_ = false;
    // Shared, not copied per event: a std::function holding the provider's
    // lambda would allocate on every copy.
    std::shared_ptr<const std::function<void()>> handler_;
    std::atomic<int> event_channel_{-1};
    uint64_t event_record_ = 0;  // lock_

    // QPs whose receive path poll() may drive (opportunistic progress).
    mutable std::shared_mutex qps_lock_;
    std::vector<QueuePair*> qps_;
    // At most this many of them per empty poll; where the next visit starts.
    static constexpr size_t poll_progress_qps = 4;
    std::atomic<size_t> progress_cursor_{0};

    // Poll ownership (rx_poll_owner.cpp): an empty poll that visited every
    // QP it drives, within busy_poll_gap_ns of the previous empty poll,
    // takes their receive path from the engine thread; req_notify, the
    // engine's lease and a quiet QP give it back.
    std::atomic<bool> owns_rx_{false};
    std::atomic<int64_t> last_empty_poll_ns_{INT64_MIN / 2};
    static constexpr int64_t busy_poll_gap_ns = 50'000;
    // After a lease lapse, polls of this CQ leave the receive path to the
    // engine for a while: an application that polls once and then waits on
    // memory, in a loop, would otherwise pay a lease tick per iteration.
    std::atomic<int64_t> no_take_until_ns_{INT64_MIN / 2};
    static constexpr int64_t lapse_backoff_ns = 100'000'000;
    std::atomic<uint64_t> poll_calls_{0};
    bool busy_polling(int64_t now);
    std::atomic<bool> local_peers_{false};  // note_local_peer(); never cleared
    void place_local_writes(const Completion* c, int n);
};

}  // namespace iwemu
