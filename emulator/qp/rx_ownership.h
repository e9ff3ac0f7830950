// Who reads a QP's socket: the one receive-ownership policy.
//
// Octets that arrive on a QP's TCP socket are read by exactly one kind of
// thread at a time, and the choice decides how many wake-ups a message
// costs.  The receive pass itself is serialised by the QP's rx_lock_ (any
// thread may run one when it gets there first); this type decides whose
// job it is to run one, and so what the engine's epoll set listens for:
//
//   Reader::engine  the engine thread, on EPOLLIN.  The default, and where
//                   the receive path always returns when in doubt.
//   Reader::poller  a thread busy-polling an empty CQ (rx_poll_owner.cpp).
//                   Each empty poll reads the socket itself; the engine
//                   drops EPOLLIN so an arrival wakes nobody.  Leased: the
//                   engine checks every Engine::poll_lease_tick_ms that the
//                   poller still polls (lease_* below).
//   Reader::waiter  a thread asleep for a completion event, in poll() on the
//                   socket and its channel (rx_event_waiter.cpp).  No lease:
//                   it hands the socket back before its read() returns.
//
// A posting thread (post_send) never owns the socket: it runs a pass when
// the receive path has read nothing for assist_after_ns (assist_*, below;
// rx_post_assist.cpp).
//
// Orthogonal to the reader, the receive path may be paused, and then nobody
// reads (level-triggered EPOLLIN would spin) until a timer, a post or the
// peer's end of stream resumes it:
//   Pause::rnr           a Send found no receive (rx_rnr_wait.cpp), at most
//                        Config::rnr_wait_ms; EPOLLRDHUP still heard once
//   Pause::rnr_peer_fin  ... and the peer's FIN is behind it: at most
//                        rnr_wait_after_peer_fin more, nothing left to hear
//   Pause::fault         an IWEMU_FAULTS delay / stall / late_read hold
//                        (rx_fault_hold.cpp), until the engine's timer.
// A reader keeps its role through a pause (a poller polls on, and its polls
// re-run the parked receiver); a waiter may not start on a paused socket.
//
// Every wait is bounded: a poller by its lease (a tick without a poll, or
// lease_wait_ticks_max ticks of a poller that gets no CPU), or by quiet_*
// when the QP stays silent; a waiter by the channel's event; a pause by its
// deadline; a posting thread's turn by assist_after_ns.  Nothing waits for
// an event that may not come.
//
// State changes happen under the QP's sq_lock_ (the epoll interest is
// applied there); reader() is read without it.  The quiet and lease
// counters are written by polling threads and the engine without a lock:
// each is a hint that can only delay a hand-over by one look.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <optional>

#include "emulator/thread_cpu_state.h"

namespace iwemu {

class RxOwnership {
public:
    enum class Reader : uint8_t { engine, poller, waiter };
    enum class ReaderEvent : uint8_t {
        poll_found_nothing,  // a busy poller's empty poll (the CQs lend it: cq.h lends_rx)
        waiter_sleeps,       // a thread goes to sleep for a completion event
        hand_back,           // req_notify, a completion event's waiter woke, lease lapsed, QP quiet
    };
    enum class Pause : uint8_t { none, rnr, rnr_peer_fin, fault };
    enum class PauseEvent : uint8_t {
        rnr_park,       // a Send found no receive
        rnr_peer_fin,   // the peer's FIN heard behind the parked Send
        rnr_unpark,     // a receive came, the deadline passed, or the stream ended
        fault_hold,     // a fault rule holds the socket unread
        fault_over,     // the hold ended and no RNR park lies under it
        fault_over_rnr, // the hold ended over a receiver still parked on a Send
        reset,          // a new stream, or the connection is gone
    };

    // The transition tables.
    static Reader next(Reader from, ReaderEvent ev);
    static Pause next(Pause from, PauseEvent ev);

    // The engine's epoll interest in the socket (EPOLLIN | EPOLLRDHUP |
    // EPOLLOUT bits) for a state.  peer_fin_read: EOF already read, nothing
    // more to receive.  tx_backlog: TCP pushed back, the engine waits for
    // EPOLLOUT.  engine_receives: Config::engine_receives (tests say no).
    static uint32_t engine_events(Reader reader, Pause pause, bool peer_fin_read, bool tx_backlog,
                                  bool engine_receives);

    // ---- the state (sq_lock_ to change) ------------------------------------
    Reader reader() const { return reader_.load(std::memory_order_relaxed); }
    bool owned() const { return reader() != Reader::engine; }
    Pause pause() const { return pause_; }
    bool paused() const { return pause_ != Pause::none; }
    // Apply an event; true when the state changed (the epoll interest must follow).
    bool apply(ReaderEvent ev);
    bool apply(PauseEvent ev);
    // A sleeping waiter may read the socket itself: not paused and not at EOF.
    bool waiter_may_read(bool peer_fin_read) const { return !paused() && !peer_fin_read; }

    // ---- bounds --------------------------------------------------------------
    // A QP whose socket gave nothing for quiet_visits empty polls and
    // quiet_ns goes back to the engine and empty polls stop reading it (an
    // idle QP beside a busy one would otherwise cost a read() per poll).
    static constexpr uint32_t quiet_visits = 256;
    static constexpr int64_t quiet_ns = 1'000'000;
    // A runnable poller whose run time stands still waits for its CPU:
    // its lease holds, for this many quiet ticks at most.
    static constexpr uint32_t lease_wait_ticks_max = 20;
    // A posting thread looks every assist_every_posts posts, and runs a
    // pass after assist_after_ns without a read.
    static constexpr uint32_t assist_every_posts = 32;
    static constexpr int64_t assist_after_ns = 1'000'000;
    // A parked receiver with the peer's FIN behind its Send waits this long
    // more at most (a posting loop between two posts on a loaded host).
    static constexpr auto rnr_wait_after_peer_fin = std::chrono::milliseconds(100);

    // ---- quiet detection (any polling thread) ------------------------------
    // Whether an empty poll should read the socket, given the QP's count of
    // FPDUs received and the poller's clock.  Counts the visit.
    bool poll_wanted(uint64_t fpdus, int64_t now_ns);
    bool quiet(uint64_t fpdus, int64_t now_ns) const;
    // A poll that drives the owned receive path: the lease holds.
    void note_poll() { polls_.store(polls_.load(std::memory_order_relaxed) + 1, std::memory_order_relaxed); }

    // ---- the poller's lease (engine thread) --------------------------------
    void set_poller(pid_t tid) { poller_tid_.store(tid, std::memory_order_relaxed); }
    pid_t poller() const { return poller_tid_.load(std::memory_order_relaxed); }
    // The QP's empty polls and its CQs' poll calls: what tells a poller is there.
    struct PollCounts {
        uint32_t qp_polls;
        uint64_t cq_polls;
        bool operator==(const PollCounts&) const = default;
    };
    PollCounts poll_counts(uint64_t cq_polls) const { return {polls_.load(std::memory_order_relaxed), cq_polls}; }
    // Once a tick: true when nothing polled since the last tick (then ask
    // poller_waits_for_cpu before handing back).
    bool lease_quiet_tick(PollCounts now);
    // A tick without a poll: does the poller merely wait for its CPU?
    // `st`: its state now (nullopt: gone), `now_ns`: the engine's clock.
    bool poller_waits_for_cpu(const std::optional<ThreadCpuState>& st, int64_t now_ns);
    void lease_lapsed() { lease_quiet_ticks_ = 0; }

    // ---- a posting thread's turn (sq_lock_) -------------------------------
    // Every assist_every_posts posts: true (then call assist_due).
    bool assist_look_due();
    // `reads`: the QP's receive syscalls so far.  True: run a pass now.
    bool assist_due(uint64_t reads, int64_t now_ns);

private:
    std::atomic<Reader> reader_{Reader::engine};
    Pause pause_ = Pause::none;
    // quiet detection
    std::atomic<uint64_t> fpdus_seen_{0};
    std::atomic<uint32_t> empty_visits_{0};
    std::atomic<int64_t> quiet_since_ns_{0};
    // lease
    std::atomic<uint32_t> polls_{0};  // empty polls while owned
    std::atomic<pid_t> poller_tid_{0};
    PollCounts lease_seen_{0, 0};     // engine thread: the counts at the last tick
    uint32_t lease_quiet_ticks_ = 0;  // ticks in a row without a poll
    int64_t lease_on_cpu_seen_ns_ = 0;
    int64_t lease_sample_ns_ = 0;
    // assist
    uint32_t assist_posts_ = 0;
    uint64_t assist_reads_seen_ = 0;
    int64_t assist_since_ns_ = 0;
};

}  // namespace iwemu
