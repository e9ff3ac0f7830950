// The receive-ownership policy (emulator/qp/rx_ownership.h) on its own:
// its transition tables, the epoll interest each state gives the engine,
// and the bounds of every hand-over (quiet QP, lease, posting thread).
#include "emulator/qp/rx_ownership.h"

#include <gtest/gtest.h>
#include <sys/epoll.h>

namespace iwemu {
namespace {

using Reader = RxOwnership::Reader;
using ReaderEvent = RxOwnership::ReaderEvent;
using Pause = RxOwnership::Pause;
using PauseEvent = RxOwnership::PauseEvent;

constexpr uint32_t in_rdhup = EPOLLIN | EPOLLRDHUP;

TEST(RxOwnership, AnEmptyPollOrASleepingWaiterTakesTheSocketFromTheEngine)
{
    EXPECT_EQ(RxOwnership::next(Reader::engine, ReaderEvent::poll_found_nothing), Reader::poller);
    EXPECT_EQ(RxOwnership::next(Reader::engine, ReaderEvent::waiter_sleeps), Reader::waiter);
    EXPECT_EQ(RxOwnership::next(Reader::engine, ReaderEvent::hand_back), Reader::engine);
}

TEST(RxOwnership, AnOwnerKeepsItUntilItIsHandedBackAndEveryOwnerReturnsToTheEngine)
{
    // A waiter that finds a poller's socket sleeps on it: the lease stays the poller's.
    EXPECT_EQ(RxOwnership::next(Reader::poller, ReaderEvent::waiter_sleeps), Reader::poller);
    EXPECT_EQ(RxOwnership::next(Reader::poller, ReaderEvent::poll_found_nothing), Reader::poller);
    // A poller that finds a waiter's socket reads it on its polls, without a lease.
    EXPECT_EQ(RxOwnership::next(Reader::waiter, ReaderEvent::poll_found_nothing), Reader::waiter);
    EXPECT_EQ(RxOwnership::next(Reader::waiter, ReaderEvent::waiter_sleeps), Reader::waiter);
    for (Reader r : {Reader::engine, Reader::poller, Reader::waiter})
        EXPECT_EQ(RxOwnership::next(r, ReaderEvent::hand_back), Reader::engine);
}

TEST(RxOwnership, ApplyReportsWhetherTheEpollInterestMustChange)
{
    RxOwnership o;
    EXPECT_FALSE(o.owned());
    EXPECT_TRUE(o.apply(ReaderEvent::poll_found_nothing));
    EXPECT_EQ(o.reader(), Reader::poller);
    EXPECT_FALSE(o.apply(ReaderEvent::waiter_sleeps));  // no change: no epoll_ctl
    EXPECT_TRUE(o.apply(ReaderEvent::hand_back));
    EXPECT_FALSE(o.owned());
    EXPECT_FALSE(o.apply(ReaderEvent::hand_back));

    EXPECT_TRUE(o.apply(PauseEvent::rnr_park));
    EXPECT_TRUE(o.paused());
    EXPECT_FALSE(o.apply(PauseEvent::rnr_park));
    EXPECT_TRUE(o.apply(PauseEvent::rnr_unpark));
    EXPECT_FALSE(o.paused());
}

TEST(RxOwnership, AnRnrParkHearsThePeersFinOnceAndEndsOnAReceiveOrAReset)
{
    EXPECT_EQ(RxOwnership::next(Pause::none, PauseEvent::rnr_park), Pause::rnr);
    EXPECT_EQ(RxOwnership::next(Pause::rnr, PauseEvent::rnr_peer_fin), Pause::rnr_peer_fin);
    EXPECT_EQ(RxOwnership::next(Pause::rnr_peer_fin, PauseEvent::rnr_peer_fin), Pause::rnr_peer_fin);
    EXPECT_EQ(RxOwnership::next(Pause::rnr, PauseEvent::rnr_unpark), Pause::none);
    EXPECT_EQ(RxOwnership::next(Pause::rnr_peer_fin, PauseEvent::rnr_unpark), Pause::none);
    // A FIN heard with nothing parked changes nothing.
    EXPECT_EQ(RxOwnership::next(Pause::none, PauseEvent::rnr_peer_fin), Pause::none);
    for (Pause p : {Pause::none, Pause::rnr, Pause::rnr_peer_fin, Pause::fault})
        EXPECT_EQ(RxOwnership::next(p, PauseEvent::reset), Pause::none);
}

TEST(RxOwnership, AFaultHoldOutranksAnRnrParkAndLeavesItParkedWhenItEnds)
{
    EXPECT_EQ(RxOwnership::next(Pause::none, PauseEvent::fault_hold), Pause::fault);
    EXPECT_EQ(RxOwnership::next(Pause::rnr, PauseEvent::fault_hold), Pause::fault);
    // Only the hold's own end resumes reading, not the parked Send's.
    EXPECT_EQ(RxOwnership::next(Pause::fault, PauseEvent::rnr_unpark), Pause::fault);
    EXPECT_EQ(RxOwnership::next(Pause::fault, PauseEvent::rnr_peer_fin), Pause::fault);
    EXPECT_EQ(RxOwnership::next(Pause::fault, PauseEvent::fault_over), Pause::none);
    EXPECT_EQ(RxOwnership::next(Pause::fault, PauseEvent::fault_over_rnr), Pause::rnr);
}

TEST(RxOwnership, TheEngineListensForArrivalsOnlyWhenItIsTheReader)
{
    EXPECT_EQ(RxOwnership::engine_events(Reader::engine, Pause::none, false, false, true), in_rdhup);
    EXPECT_EQ(RxOwnership::engine_events(Reader::engine, Pause::none, false, true, true), in_rdhup | EPOLLOUT);
    // An owner reads data, FIN and errors itself: the socket leaves the epoll set ...
    EXPECT_EQ(RxOwnership::engine_events(Reader::poller, Pause::none, false, false, true), 0u);
    EXPECT_EQ(RxOwnership::engine_events(Reader::waiter, Pause::none, false, false, true), 0u);
    // ... unless TCP pushed a send back.
    EXPECT_EQ(RxOwnership::engine_events(Reader::poller, Pause::none, false, true, true), uint32_t{EPOLLOUT});
    // Tests that keep the engine from receiving.
    EXPECT_EQ(RxOwnership::engine_events(Reader::engine, Pause::none, false, false, false), 0u);
}

TEST(RxOwnership, APausedReceivePathIsReadByNobodyButStillHearsTheFinOnce)
{
    for (Reader r : {Reader::engine, Reader::poller, Reader::waiter}) {
        EXPECT_EQ(RxOwnership::engine_events(r, Pause::rnr, false, false, true), uint32_t{EPOLLRDHUP});
        EXPECT_EQ(RxOwnership::engine_events(r, Pause::fault, false, false, true), uint32_t{EPOLLRDHUP});
        EXPECT_EQ(RxOwnership::engine_events(r, Pause::rnr_peer_fin, false, false, true), 0u);
        EXPECT_EQ(RxOwnership::engine_events(r, Pause::rnr_peer_fin, false, true, true), uint32_t{EPOLLOUT});
    }
}

TEST(RxOwnership, AfterThePeersEofOnlySendingIsLeft)
{
    for (Reader r : {Reader::engine, Reader::poller, Reader::waiter})
        for (Pause p : {Pause::none, Pause::rnr, Pause::rnr_peer_fin, Pause::fault})
            EXPECT_EQ(RxOwnership::engine_events(r, p, true, false, true), uint32_t{EPOLLOUT});
}

TEST(RxOwnership, AWaiterMayNotSleepOnAPausedSocketOrAfterEof)
{
    RxOwnership o;
    EXPECT_TRUE(o.waiter_may_read(false));
    EXPECT_FALSE(o.waiter_may_read(true));
    o.apply(PauseEvent::rnr_park);
    EXPECT_FALSE(o.waiter_may_read(false));
    o.apply(PauseEvent::rnr_unpark);
    o.apply(PauseEvent::fault_hold);
    EXPECT_FALSE(o.waiter_may_read(false));
}

TEST(RxOwnership, AQpTurnsQuietOnlyAfterEnoughEmptyVisitsAndEnoughTime)
{
    RxOwnership o;
    const int64_t t0 = 1'000'000'000;
    uint64_t fpdus = 5;
    EXPECT_TRUE(o.poll_wanted(fpdus, t0));  // a new count: wanted, visits start over
    // Many visits in little time: still wanted (a busy ping-pong's gap).
    for (uint32_t i = 0; i < 2 * RxOwnership::quiet_visits; ++i) EXPECT_TRUE(o.poll_wanted(fpdus, t0 + i));
    EXPECT_FALSE(o.quiet(fpdus, t0 + RxOwnership::quiet_ns - 1));
    // Long enough: quiet, and empty polls stop reading it.
    EXPECT_TRUE(o.quiet(fpdus, t0 + RxOwnership::quiet_ns + 1));
    EXPECT_FALSE(o.poll_wanted(fpdus, t0 + RxOwnership::quiet_ns + 1));
    // Its next FPDU (received by the engine) makes it wanted again.
    EXPECT_FALSE(o.quiet(fpdus + 1, t0 + RxOwnership::quiet_ns + 2));
    EXPECT_TRUE(o.poll_wanted(fpdus + 1, t0 + RxOwnership::quiet_ns + 2));
    EXPECT_FALSE(o.quiet(fpdus + 1, t0 + 10 * RxOwnership::quiet_ns));
}

TEST(RxOwnership, FewVisitsOverALongTimeAreNotQuiet)
{
    RxOwnership o;
    o.poll_wanted(1, 0);
    for (uint32_t i = 1; i < RxOwnership::quiet_visits; ++i) o.poll_wanted(1, int64_t{i} * RxOwnership::quiet_ns);
    EXPECT_FALSE(o.quiet(1, int64_t{RxOwnership::quiet_visits} * RxOwnership::quiet_ns));
}

TEST(RxOwnership, ALeaseHoldsWhileThePollerPolls)
{
    RxOwnership o;
    o.apply(ReaderEvent::poll_found_nothing);
    EXPECT_FALSE(o.lease_quiet_tick(o.poll_counts(10)));  // first tick: counts differ from the start
    o.note_poll();
    EXPECT_FALSE(o.lease_quiet_tick(o.poll_counts(10)));  // an empty poll
    EXPECT_FALSE(o.lease_quiet_tick(o.poll_counts(11)));  // a poll that returned completions
    EXPECT_TRUE(o.lease_quiet_tick(o.poll_counts(11)));   // nothing since
}

TEST(RxOwnership, APollerThatSleepsOrIsGoneLosesItsLeaseAtOnce)
{
    RxOwnership o;
    EXPECT_FALSE(o.poller_waits_for_cpu(std::nullopt, 0));
    EXPECT_FALSE(o.poller_waits_for_cpu(ThreadCpuState{false, 5'000'000}, 1'000'000));
}

TEST(RxOwnership, APollerWaitingForItsCpuKeepsItsLeaseForBoundedTicks)
{
    RxOwnership o;
    const int64_t tick = 1'000'000;
    const int64_t cpu = 42'000'000;  // its run time stands still: preempted
    uint32_t held = 0;
    for (uint32_t t = 0; t < 3 * RxOwnership::lease_wait_ticks_max; ++t)
        if (o.poller_waits_for_cpu(ThreadCpuState{true, cpu}, int64_t{t + 1} * tick)) ++held;
        else break;
    EXPECT_EQ(held, RxOwnership::lease_wait_ticks_max);
}

TEST(RxOwnership, APollerThatRunsElsewhereLosesItsLease)
{
    RxOwnership o;
    const int64_t tick = 1'000'000;
    EXPECT_TRUE(o.poller_waits_for_cpu(ThreadCpuState{true, 0}, tick));  // first quiet tick: sampled
    // It ran the whole tick (elsewhere, not polling this QP): walked away.
    EXPECT_FALSE(o.poller_waits_for_cpu(ThreadCpuState{true, tick}, 2 * tick));
    // After a lapse the count starts over.
    o.lease_lapsed();
    EXPECT_TRUE(o.poller_waits_for_cpu(ThreadCpuState{true, tick}, 3 * tick));
}

TEST(RxOwnership, APostingThreadLooksEveryFewPostsAndRunsAPassOnlyAfterTheBound)
{
    RxOwnership o;
    int looks = 0;
    for (uint32_t i = 0; i < 10 * RxOwnership::assist_every_posts; ++i) looks += o.assist_look_due();
    EXPECT_EQ(looks, 10);
    const int64_t t0 = 5'000'000;
    EXPECT_FALSE(o.assist_due(100, t0));  // first look: starts the clock
    EXPECT_FALSE(o.assist_due(100, t0 + RxOwnership::assist_after_ns - 1));
    EXPECT_TRUE(o.assist_due(100, t0 + RxOwnership::assist_after_ns));
    // At most one pass per bound while nothing is read.
    EXPECT_FALSE(o.assist_due(100, t0 + RxOwnership::assist_after_ns + 1));
    EXPECT_TRUE(o.assist_due(100, t0 + 2 * RxOwnership::assist_after_ns));
}

TEST(RxOwnership, AReceivePathThatReadsNeedsNoPostingThread)
{
    RxOwnership o;
    const int64_t t0 = 5'000'000;
    uint64_t reads = 1;
    o.assist_due(reads, t0);
    for (int i = 1; i < 100; ++i) EXPECT_FALSE(o.assist_due(++reads, t0 + i * RxOwnership::assist_after_ns));
}

}  // namespace
}  // namespace iwemu
