#include "emulator/qp/rx_ownership.h"

#include <sys/epoll.h>

namespace iwemu {

namespace {

using Reader = RxOwnership::Reader;
using Pause = RxOwnership::Pause;

// [from][event]: poll_found_nothing, waiter_sleeps, hand_back.  A waiter
// that finds a poller's socket sleeps on it without taking the lease over;
// either hand-back returns it to the engine.
constexpr Reader reader_table[3][3] = {
    /* engine */ {Reader::poller, Reader::waiter, Reader::engine},
    /* poller */ {Reader::poller, Reader::poller, Reader::engine},
    /* waiter */ {Reader::waiter, Reader::waiter, Reader::engine},
};

// [from][event]: rnr_park, rnr_peer_fin, rnr_unpark, fault_hold, fault_over,
// fault_over_rnr, reset.  A fault hold outranks an RNR park under it: only
// its own end (or a reset) resumes reading.
constexpr Pause pause_table[4][7] = {
    /* none */ {Pause::rnr, Pause::none, Pause::none, Pause::fault, Pause::none, Pause::none, Pause::none},
    /* rnr */ {Pause::rnr, Pause::rnr_peer_fin, Pause::none, Pause::fault, Pause::rnr, Pause::rnr, Pause::none},
    /* rnr_peer_fin */
    {Pause::rnr_peer_fin, Pause::rnr_peer_fin, Pause::none, Pause::fault, Pause::rnr_peer_fin, Pause::rnr_peer_fin,
     Pause::none},
    /* fault */ {Pause::fault, Pause::fault, Pause::fault, Pause::fault, Pause::none, Pause::rnr, Pause::none},
};

}  // namespace

RxOwnership::Reader RxOwnership::next(Reader from, ReaderEvent ev)
{
    return reader_table[static_cast<int>(from)][static_cast<int>(ev)];
}

RxOwnership::Pause RxOwnership::next(Pause from, PauseEvent ev)
{
    return pause_table[static_cast<int>(from)][static_cast<int>(ev)];
}

uint32_t RxOwnership::engine_events(Reader reader, Pause pause, bool peer_fin_read, bool tx_backlog,
                                    bool engine_receives)
{
    if (peer_fin_read) return EPOLLOUT;  // EOF already read: EPOLLIN would spin
    uint32_t events = tx_backlog ? EPOLLOUT : 0u;
    switch (pause) {
    case Pause::rnr:
    case Pause::fault:
        // No EPOLLIN, which would spin on the unread octets, but the
        // peer's FIN must still be heard -- once.
        return events | EPOLLRDHUP;
    case Pause::rnr_peer_fin:
        return events;
    case Pause::none:
        break;
    }
    // Owned by a poller or a waiter: its recv() sees data, FIN and errors
    // itself, so without a send backlog the socket leaves the epoll set.
    // Merely being in it costs every message: each arriving segment and
    // ACK runs the epoll callback in the peer's sendmsg(), masked or not
    // (docs/performance-log.md, seventh session).
    if (reader == Reader::engine && engine_receives) events |= EPOLLIN | EPOLLRDHUP;
    return events;
}

bool RxOwnership::apply(ReaderEvent ev)
{
    const Reader from = reader();
    const Reader to = next(from, ev);
    reader_.store(to, std::memory_order_relaxed);
    return to != from;
}

bool RxOwnership::apply(PauseEvent ev)
{
    const Pause from = pause_;
    pause_ = next(from, ev);
    return pause_ != from;
}

bool RxOwnership::poll_wanted(uint64_t fpdus, int64_t now_ns)
{
    if (fpdus != fpdus_seen_.load(std::memory_order_relaxed)) {
        fpdus_seen_.store(fpdus, std::memory_order_relaxed);
        empty_visits_.store(0, std::memory_order_relaxed);
        return true;
    }
    if (quiet(fpdus, now_ns)) return false;
    const uint32_t visits = empty_visits_.load(std::memory_order_relaxed);
    if (visits == 0) quiet_since_ns_.store(now_ns, std::memory_order_relaxed);
    if (visits < quiet_visits) empty_visits_.store(visits + 1, std::memory_order_relaxed);
    return true;
}

bool RxOwnership::quiet(uint64_t fpdus, int64_t now_ns) const
{
    return empty_visits_.load(std::memory_order_relaxed) >= quiet_visits &&
           now_ns - quiet_since_ns_.load(std::memory_order_relaxed) >= quiet_ns &&
           fpdus == fpdus_seen_.load(std::memory_order_relaxed);
}

bool RxOwnership::lease_quiet_tick(PollCounts now)
{
    const bool lapsed = now == lease_seen_;
    lease_seen_ = now;
    if (!lapsed) lease_quiet_ticks_ = 0;
    return lapsed;
}

// A tick without a poll: the poller walked away, or it was preempted
// (another busy thread on its CPU, vCPU contention) and polls again as soon
// as it runs.  Handing back then would cost it the receive path for the
// CQ's lapse back-off.  A poller that sleeps has walked away; a runnable
// one whose run time stands still since the first quiet tick waits for its
// CPU, though for lease_wait_ticks_max ticks at most; one that runs does
// so elsewhere, and its run time shows that at the next tick.
bool RxOwnership::poller_waits_for_cpu(const std::optional<ThreadCpuState>& st, int64_t now_ns)
{
    if (!st || !st->runnable) return false;  // gone, asleep, or no account kept
    if (lease_quiet_ticks_++ == 0) {
        lease_on_cpu_seen_ns_ = st->on_cpu_ns;
        lease_sample_ns_ = now_ns;
        return true;
    }
    const int64_t ran = st->on_cpu_ns - lease_on_cpu_seen_ns_;
    return 2 * ran < now_ns - lease_sample_ns_ && lease_quiet_ticks_ <= lease_wait_ticks_max;
}

bool RxOwnership::assist_look_due()
{
    if (++assist_posts_ < assist_every_posts) return false;
    assist_posts_ = 0;
    return true;
}

// A healthy engine reads far more often than assist_after_ns, so the look
// costs a counter compare; a QP that receives nothing pays one pass per
// assist_after_ns at most.
bool RxOwnership::assist_due(uint64_t reads, int64_t now_ns)
{
    if (reads != assist_reads_seen_ || assist_since_ns_ == 0) {
        assist_reads_seen_ = reads;
        assist_since_ns_ = now_ns;
        return false;
    }
    if (now_ns - assist_since_ns_ < assist_after_ns) return false;
    assist_since_ns_ = now_ns;
    return true;
}

}  // namespace iwemu
