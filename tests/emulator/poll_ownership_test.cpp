// Poll ownership of the receive path (emulator/qp/rx_poll_owner.cpp): a thread
// that keeps polling an empty CQ takes EPOLLIN away from the engine thread
// and reads arriving FPDUs itself; the engine gets the receive path back on
// req_notify, when the polls stop (lease), and for a QP that stays quiet, so
// nothing waits on a poller that went away.
#include <pthread.h>
#include <sched.h>
#include <sys/epoll.h>
#include <sys/resource.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "tests/emulator/qp_loopback_fixture.h"

namespace iwemu::test {
namespace {

constexpr int kTakeAfter = 8;  // back-to-back empty polls: more than enough to take the receive path

void poll_empty(CompletionQueue* cq, int times)
{
    Completion wc[4];
    for (int i = 0; i < times; ++i) ASSERT_EQ(cq->poll(wc, 4), 0);
}

// Busy-poll an empty CQ until `qp`'s receive path is taken (a loaded machine
// may deschedule the poller between two polls, or the QP's lock may be busy
// for a moment: both only delay the take).
bool poll_until_owned(CompletionQueue* cq, QueuePair* qp)
{
    Completion wc[4];
    const auto end = std::chrono::steady_clock::now() + 5s;
    while (!qp->rx_poll_owned() && std::chrono::steady_clock::now() < end)
        if (cq->poll(wc, 4) != 0) return false;
    return qp->rx_poll_owned();
}

// Wait without polling (a poll would run the receive path itself).
bool wait_size(CompletionQueue* cq, uint32_t n, std::chrono::milliseconds timeout)
{
    return wait_until([&] { return cq->size() >= n; }, timeout);
}

// The interest of whichever epoll set of this process holds `fd`, as the
// kernel lists it in /proc/self/fdinfo; nullopt: no epoll set holds it.
std::optional<uint32_t> epoll_interest(int fd)
{
    for (const auto& e : std::filesystem::directory_iterator("/proc/self/fd")) {
        std::error_code ec;
        if (std::filesystem::read_symlink(e.path(), ec).string() != "anon_inode:[eventpoll]") continue;
        std::ifstream info("/proc/self/fdinfo/" + e.path().filename().string());
        for (std::string line; std::getline(info, line);) {
            int tfd = -1;
            unsigned events = 0;
            if (std::sscanf(line.c_str(), "tfd: %d events: %x", &tfd, &events) == 2 && tfd == fd) return events;
        }
    }
    return std::nullopt;
}

// An RDMA Write of `len` octets of `fill` from a's buffer into b's, then up
// to 5 s for b's QP to receive it.  Watches the QP's counter, not the memory
// (that would race with the placement as far as ThreadSanitizer can tell).
void write_and_wait_received(LoopbackPair& p, PairBuffers& buf, uint8_t fill, size_t len)
{
    std::memset(buf.a.data(), fill, len);
    ASSERT_EQ(p.a->post_send(WrOpcode::rdma_write, buf.a.data(), static_cast<uint32_t>(len), buf.ma, 1,
                             reinterpret_cast<uint64_t>(buf.b.data()), buf.mb->rkey()),
              0);
    const auto end = std::chrono::steady_clock::now() + 5s;
    while (p.b->qp->counters().rx_fpdus.load() < 1 && std::chrono::steady_clock::now() < end)
        std::this_thread::sleep_for(100us);
}

TEST(PollOwnership, EmptyPollsTakeTheReceivePathAndKeepItAcrossACompletion)
{
    LoopbackPair p;
    PairBuffers buf(p);
    ASSERT_EQ(p.b->post_recv(buf.b.data(), 64, buf.mb, 7), 0);
    EXPECT_FALSE(p.b->qp->rx_poll_owned());
    EXPECT_TRUE(poll_until_owned(p.b->rcq, p.b->qp));

    std::memcpy(buf.a.data(), "ping", 4);
    ASSERT_EQ(p.a->post_send(WrOpcode::send, buf.a.data(), 4, buf.ma, 1), 0);
    // Busy-poll (Side::wait sleeps between polls, and a poller that slows
    // down hands the receive path back).
    Completion got[1];
    int n = 0;
    const auto end = std::chrono::steady_clock::now() + 5s;
    while (n == 0 && std::chrono::steady_clock::now() < end) n = p.b->rcq->poll(got, 1);
    ASSERT_EQ(n, 1);
    EXPECT_EQ(got[0].wr_id, 7u);
    EXPECT_EQ(got[0].status, WcStatus::success);
    EXPECT_EQ(std::memcmp(buf.b.data(), "ping", 4), 0);
    // The poller read the Send itself: the engine never ran a receive pass
    // for it (it had no EPOLLIN for this socket) -- unless the poller was
    // descheduled for a whole lease tick (a loaded machine) and the lease
    // handed the receive path back first.
    if (p.b->qp->counters().rx_poll_lease_lapses.load() == 0) {
        EXPECT_EQ(p.b->qp->counters().rx_engine_passes.load(), 0u);
        // A poller that got its completion comes back for the next one:
        // handing back and taking again would cost two epoll_ctl() a message.
        EXPECT_TRUE(p.b->qp->rx_poll_owned());
    }
}

// While a poller owns the receive path the socket is in no epoll set at
// all: a masked entry still sits on the socket's wait queue, and every
// arriving segment and ACK would run its callback inside the peer's
// sendmsg() (docs/performance.md, seventh session).  Handing the receive
// path back puts it in again, with read interest.
TEST(PollOwnership, AnOwnedSocketLeavesTheEngineEpollSetUntilHandedBack)
{
    LoopbackPair p;
    PairBuffers buf(p);
    const int fd = p.b->qp->socket_fd();
    ASSERT_GE(fd, 0);
    ASSERT_TRUE(epoll_interest(fd).has_value());
    EXPECT_EQ(*epoll_interest(fd) & (EPOLLIN | EPOLLRDHUP), uint32_t{EPOLLIN | EPOLLRDHUP});

    // Look while owned, and only trust a look no lease lapse (a poller
    // descheduled for a whole tick on a loaded machine) came between.
    bool clean = false;
    std::optional<uint32_t> owned_interest;
    for (int attempt = 0; attempt < 50 && !clean; ++attempt) {
        ASSERT_TRUE(poll_until_owned(p.b->rcq, p.b->qp));
        const uint64_t lapses = p.b->qp->counters().rx_poll_lease_lapses.load();
        owned_interest = epoll_interest(fd);
        clean = p.b->qp->rx_poll_owned() && p.b->qp->counters().rx_poll_lease_lapses.load() == lapses;
    }
    ASSERT_TRUE(clean);
    EXPECT_FALSE(owned_interest.has_value()) << "events 0x" << std::hex << owned_interest.value_or(0);

    ASSERT_EQ(p.b->rcq->req_notify(false), 0);
    EXPECT_FALSE(p.b->qp->rx_poll_owned());
    ASSERT_TRUE(epoll_interest(fd).has_value());
    EXPECT_EQ(*epoll_interest(fd) & (EPOLLIN | EPOLLRDHUP), uint32_t{EPOLLIN | EPOLLRDHUP});
}

// A QP nothing arrives on (a pure sender, the idle rdma_cm QP beside the test
// QP) is not read by every empty poll: after RxOwnership::quiet_visits empty visits
// and quiet_ns it goes back to the engine, which receives its next FPDU.
TEST(PollOwnership, AQuietQpGoesBackToTheEngineAndPollsStopReadingIt)
{
    LoopbackPair p;
    PairBuffers buf(p);
    ASSERT_EQ(p.b->post_recv(buf.b.data(), 64, buf.mb, 1), 0);
    ASSERT_TRUE(poll_until_owned(p.b->rcq, p.b->qp));
    // (A loaded machine may let the lease hand it back first: wait for quiet.)
    ASSERT_TRUE(wait_until(
        [&] {
            poll_empty(p.b->rcq, 64);
            return !p.b->qp->rx_poll_owned() && p.b->qp->poll_rx_quiet(CompletionQueue::now_ns());
        },
        5s));
    const uint64_t reads = p.b->qp->counters().rx_syscalls.load();
    poll_empty(p.b->rcq, 1000);
    EXPECT_EQ(p.b->qp->counters().rx_syscalls.load(), reads) << "empty polls still read a quiet QP";
    EXPECT_FALSE(p.b->qp->rx_poll_owned());

    // Its next FPDU: the engine receives it (nobody polls now), and polls
    // read the QP again (until it has been quiet for as long once more).
    const uint64_t passes = p.b->qp->counters().rx_engine_passes.load();
    ASSERT_EQ(p.a->post_send(WrOpcode::send, buf.a.data(), 8, buf.ma, 1), 0);
    ASSERT_TRUE(wait_size(p.b->rcq, 1, 5s));
    EXPECT_GT(p.b->qp->counters().rx_engine_passes.load(), passes);
    Completion wc[2];
    ASSERT_EQ(p.b->rcq->poll(wc, 2), 1);
    const uint64_t reads_before = p.b->qp->counters().rx_syscalls.load();
    EXPECT_TRUE(wait_until(
        [&] {
            poll_empty(p.b->rcq, 1);
            return p.b->qp->counters().rx_syscalls.load() > reads_before;
        },
        5s));
}

// A poller that owned the receive path and then slowed down (polls too far
// apart to take anything) still drives the QP; once the QP is quiet those
// polls stop reading it, so it must go back to the engine then, or the next
// FPDU would wait for a reader that never comes.
TEST(PollOwnership, AQuietQpOfAPollerThatSlowedDownGoesBackToTheEngine)
{
    // A poller descheduled for a whole lease tick (a loaded machine) lets the
    // lease hand the QP back first, which is not the case under test: retry.
    for (int attempt = 0; attempt < 5; ++attempt) {
        LoopbackPair p;
        PairBuffers buf(p);
        ASSERT_EQ(p.b->post_recv(buf.b.data(), 64, buf.mb, 1), 0);
        ASSERT_TRUE(poll_until_owned(p.b->rcq, p.b->qp));
        Completion wc[2];
        auto slow_poll = [&] {
            std::this_thread::sleep_for(100us);  // > busy_poll_gap_ns: takes nothing
            return p.b->rcq->poll(wc, 2);
        };
        auto end = std::chrono::steady_clock::now() + 5s;
        while (p.b->qp->rx_poll_owned() && std::chrono::steady_clock::now() < end) ASSERT_EQ(slow_poll(), 0);
        ASSERT_FALSE(p.b->qp->rx_poll_owned());

        ASSERT_EQ(p.a->post_send(WrOpcode::send, buf.a.data(), 8, buf.ma, 1), 0);
        int got = 0;
        end = std::chrono::steady_clock::now() + 5s;
        while (got == 0 && std::chrono::steady_clock::now() < end) got = slow_poll();
        ASSERT_EQ(got, 1) << "the Send waited for a reader that never came";
        EXPECT_EQ(wc[0].wr_id, 1u);
        if (p.b->qp->counters().rx_poll_lease_lapses.load() == 0) return;  // handed back as quiet
    }
    ADD_FAILURE() << "the lease lapsed in every attempt";
}

TEST(PollOwnership, ReqNotifyGivesTheReceivePathBackAndTheEventFires)
{
    LoopbackPair p;
    PairBuffers buf(p);
    std::atomic<int> events{0};
    p.b->rcq->set_event_handler([&] { events.fetch_add(1); });
    ASSERT_EQ(p.b->post_recv(buf.b.data(), 64, buf.mb, 1), 0);
    ASSERT_TRUE(poll_until_owned(p.b->rcq, p.b->qp));

    ASSERT_EQ(p.b->rcq->req_notify(false), 0);
    EXPECT_FALSE(p.b->qp->rx_poll_owned());
    ASSERT_EQ(p.a->post_send(WrOpcode::send, buf.a.data(), 16, buf.ma, 1), 0);
    // Nobody polls: the engine thread receives and the armed CQ signals.
    ASSERT_TRUE(wait_size(p.b->rcq, 1, 5s));
    EXPECT_EQ(events.load(), 1);
    EXPECT_GT(p.b->qp->counters().rx_engine_passes.load(), 0u);
}

// An event-driven loop (qperf's default): drain, arm, poll once more to
// close the race with a completion that came before the arm, then sleep in
// get_cq_event.  The polls around the arm are two empty polls in a row, but
// the thread is about to sleep: they must not take the receive path, or the
// event waits for the lease (qperf rc_lat went from 13 to 200 us).
TEST(PollOwnership, PollsAfterReqNotifyDoNotTakeTheReceivePath)
{
    LoopbackPair p;
    PairBuffers buf(p);
    std::atomic<int> events{0};
    p.b->rcq->set_event_handler([&] { events.fetch_add(1); });
    for (uint64_t round = 1; round <= 3; ++round) {
        ASSERT_EQ(p.b->post_recv(buf.b.data(), 64, buf.mb, round), 0);
        poll_empty(p.b->rcq, 1);
        ASSERT_EQ(p.b->rcq->req_notify(false), 0);
        poll_empty(p.b->rcq, kTakeAfter);
        EXPECT_FALSE(p.b->qp->rx_poll_owned()) << "round " << round;
        const uint64_t passes = p.b->qp->counters().rx_engine_passes.load();
        const auto t0 = std::chrono::steady_clock::now();
        ASSERT_EQ(p.a->post_send(WrOpcode::send, buf.a.data(), 8, buf.ma, round), 0);
        ASSERT_TRUE(wait_until([&] { return events.load() == static_cast<int>(round); }, 5s));
        // Delivered by the engine at once, not by a lease lapse.
        EXPECT_GT(p.b->qp->counters().rx_engine_passes.load(), passes);
        EXPECT_EQ(p.b->qp->counters().rx_poll_lease_lapses.load(), 0u);
        EXPECT_LT(std::chrono::steady_clock::now() - t0, 500ms);
        Completion wc[2];
        ASSERT_EQ(p.b->rcq->poll(wc, 2), 1);
        EXPECT_EQ(wc[0].wr_id, round);
        EXPECT_FALSE(p.b->rcq->armed());  // the event consumed the arm
        ASSERT_EQ(p.a->wait(p.a->scq, 1, 5s).size(), 1u);
    }
}

TEST(PollOwnership, APollerThatStopsDoesNotStrandASend)
{
    LoopbackPair p;
    PairBuffers buf(p);
    ASSERT_EQ(p.b->post_recv(buf.b.data(), 64, buf.mb, 1), 0);
    ASSERT_TRUE(poll_until_owned(p.b->rcq, p.b->qp));

    // The poller walks away without a completion or req_notify.
    ASSERT_EQ(p.a->post_send(WrOpcode::send, buf.a.data(), 32, buf.ma, 1), 0);
    const auto t0 = std::chrono::steady_clock::now();
    ASSERT_TRUE(wait_size(p.b->rcq, 1, 5s)) << "the receive path stayed with a thread that stopped polling";
    // The lease is a few milliseconds; allow for a loaded machine.
    EXPECT_LT(std::chrono::steady_clock::now() - t0, 1s);
    EXPECT_FALSE(p.b->qp->rx_poll_owned());
}

// A loop that polls, finds nothing and then waits elsewhere (on memory) would
// pay a lease tick per iteration; after one lapse its CQ lends nothing for a while.
TEST(PollOwnership, AfterALeaseLapseTheCqLeavesTheReceivePathToTheEngine)
{
    LoopbackPair p;
    PairBuffers buf(p);
    ASSERT_EQ(p.b->post_recv(buf.b.data(), 64, buf.mb, 1), 0);
    ASSERT_EQ(p.b->post_recv(buf.b.data(), 64, buf.mb, 2), 0);
    ASSERT_TRUE(poll_until_owned(p.b->rcq, p.b->qp));
    ASSERT_EQ(p.a->post_send(WrOpcode::send, buf.a.data(), 8, buf.ma, 1), 0);
    ASSERT_TRUE(wait_size(p.b->rcq, 1, 5s));
    EXPECT_EQ(p.b->qp->counters().rx_poll_lease_lapses.load(), 1u);
    EXPECT_FALSE(p.b->rcq->lends_rx(CompletionQueue::now_ns()));

    // The next busy poll takes nothing: the engine keeps receiving.
    Completion wc[4];
    ASSERT_EQ(p.b->rcq->poll(wc, 4), 1);
    poll_empty(p.b->rcq, kTakeAfter);
    EXPECT_FALSE(p.b->qp->rx_poll_owned());
    const uint64_t passes = p.b->qp->counters().rx_engine_passes.load();
    ASSERT_EQ(p.a->post_send(WrOpcode::send, buf.a.data(), 8, buf.ma, 2), 0);
    ASSERT_TRUE(wait_size(p.b->rcq, 1, 5s));
    EXPECT_GT(p.b->qp->counters().rx_engine_passes.load(), passes);
    EXPECT_EQ(p.b->qp->counters().rx_poll_lease_lapses.load(), 1u);
}

TEST(PollOwnership, APollerThatStopsDoesNotStrandAnRdmaWriteIntoMemoryItWatches)
{
    LoopbackPair p;
    PairBuffers buf(p);
    // Like ib_write_lat: the target polls its send CQ, then spins on memory.
    ASSERT_TRUE(poll_until_owned(p.b->scq, p.b->qp));

    write_and_wait_received(p, buf, 0x5a, 256);
    ASSERT_GE(p.b->qp->counters().rx_fpdus.load(), 1u) << "the Write stayed with a thread that stopped polling";
    EXPECT_FALSE(p.b->qp->rx_poll_owned());
    EXPECT_GT(p.b->qp->counters().rx_engine_passes.load(), 0u);  // the engine placed it
    // Let the engine's pass end, then take the receive lock once (a poll):
    // the placement happens-before the check.
    std::this_thread::sleep_for(20ms);
    Completion wc[1];
    p.b->scq->poll(wc, 1);
    EXPECT_EQ(buf.b[255], 0x5a);
}

TEST(PollOwnership, AThreadThatPollsNowAndThenLeavesTheReceivePathToTheEngine)
{
    LoopbackPair p;
    PairBuffers buf(p);
    Completion wc[4];
    for (int i = 0; i < 5; ++i) {
        ASSERT_EQ(p.b->scq->poll(wc, 4), 0);
        std::this_thread::sleep_for(2ms);  // far apart: not a busy poller
    }
    EXPECT_FALSE(p.b->qp->rx_poll_owned());
    // An RDMA Write lands at once, placed by the engine thread.
    write_and_wait_received(p, buf, 0x3c, 64);
    EXPECT_GE(p.b->qp->counters().rx_engine_passes.load(), 1u);
    // Join the engine threads before the buffers go (the counter alone orders
    // nothing for ThreadSanitizer).
    p.a.reset();
    p.b.reset();
}

TEST(PollOwnership, OffByConfiguration)
{
    PairOptions o;
    std::string err;
    ASSERT_TRUE(o.config.set("poll_owns_rx", "0", &err)) << err;
    LoopbackPair p(o);
    poll_empty(p.b->rcq, 4 * kTakeAfter);
    EXPECT_FALSE(p.b->qp->rx_poll_owned());
}

TEST(PollOwnership, BusyPollingPingPongRarelyNeedsTheEngineThread)
{
    LoopbackPair p;
    PairBuffers buf(p);
    constexpr int rounds = 2000;
    for (int i = 0; i < 64; ++i) {
        ASSERT_EQ(p.a->post_recv(buf.a.data() + 2048, 64, buf.ma, 0), 0);
        ASSERT_EQ(p.b->post_recv(buf.b.data() + 2048, 64, buf.mb, 0), 0);
    }
    auto side = [&](Side& s, MemoryRegion* mr, uint8_t* base, bool starts) {
        Completion wc[4];
        for (int i = 0; i < rounds; ++i) {
            if (!starts || i > 0) {
                const auto end = std::chrono::steady_clock::now() + 10s;
                int got = 0;
                while (got == 0 && std::chrono::steady_clock::now() < end) got = s.rcq->poll(wc, 1);
                if (got != 1 || wc[0].status != WcStatus::success) return false;
                if (s.post_recv(base + 2048, 64, mr, 0) != 0) return false;
            }
            if (s.post_send(WrOpcode::send, base, 8, mr, 0, 0, 0, 0) != 0) return false;
        }
        if (!starts) return true;
        const auto end = std::chrono::steady_clock::now() + 10s;
        while (s.rcq->poll(wc, 1) == 0)
            if (std::chrono::steady_clock::now() > end) return false;
        return true;
    };
    // Without poll ownership every message wakes the engine thread (one
    // receive pass per message); with it, the pollers read nearly all of
    // them.  A poller descheduled on an oversubscribed machine lets its
    // lease lapse and the engine take over for a while (and its CQ lends
    // nothing for 100 ms after), so the bound is generous and a run gets
    // three tries.
    uint64_t passes_a = 0, passes_b = 0;
    for (int attempt = 0; attempt < 3; ++attempt) {
        const uint64_t before_a = p.a->qp->counters().rx_engine_passes.load();
        const uint64_t before_b = p.b->qp->counters().rx_engine_passes.load();
        std::atomic<bool> ok_b{false};
        std::thread tb([&] { ok_b = side(*p.b, buf.mb, buf.b.data(), false); });
        const bool ok_a = side(*p.a, buf.ma, buf.a.data(), true);
        tb.join();
        ASSERT_TRUE(ok_a);
        ASSERT_TRUE(ok_b.load());
        passes_a = p.a->qp->counters().rx_engine_passes.load() - before_a;
        passes_b = p.b->qp->counters().rx_engine_passes.load() - before_b;
        if (passes_a < rounds / 2u && passes_b < rounds / 2u) break;
        // A lapse also keeps the CQ from lending for 100 ms (cq.h): wait it out.
        std::this_thread::sleep_for(150ms);
    }
    EXPECT_LT(passes_a, rounds / 2u);
    EXPECT_LT(passes_b, rounds / 2u);
}

TEST(PollOwnership, ASmallMessageCostsOneReadWhenTheSocketHoldsJustIt)
{
    LoopbackPair p;
    PairBuffers buf(p);
    constexpr int n = 50;
    for (int i = 0; i < n; ++i) ASSERT_EQ(p.b->post_recv(buf.b.data(), 64, buf.mb, 0), 0);
    for (int i = 0; i < n; ++i) {
        ASSERT_EQ(p.a->post_send(WrOpcode::send, buf.a.data(), 8, buf.ma, 0, 0, 0, 0), 0);
        // No poll at b: the engine thread receives each message alone.
        ASSERT_TRUE(wait_size(p.b->rcq, static_cast<uint32_t>(i + 1), 5s));
    }
    // A short read() means the socket was emptied: no second read() that
    // only returns EAGAIN.  (An event that finds the octets already read by
    // an earlier pass costs one more; allow a few.)
    EXPECT_LE(p.b->qp->counters().rx_syscalls.load(), n + n / 5u);
    EXPECT_EQ(p.b->qp->counters().rx_fpdus.load(), static_cast<uint64_t>(n));
}


// A poller that shares its CPU with another busy thread waits, now and then,
// for a whole lease tick on the run queue without polling.  It has not
// walked away: the lease must not take the receive path back (and keep its
// CQ from lending for 100 ms) for that.
TEST(PollOwnership, APollerWaitingForItsCpuKeepsTheReceivePath)
{
    cpu_set_t allowed;
    ASSERT_EQ(sched_getaffinity(0, sizeof allowed, &allowed), 0);
    int cpu = 0;
    while (cpu < CPU_SETSIZE && !CPU_ISSET(cpu, &allowed)) ++cpu;
    ASSERT_LT(cpu, CPU_SETSIZE);
    cpu_set_t one;
    CPU_ZERO(&one);
    CPU_SET(cpu, &one);

    LoopbackPair p;
    PairBuffers buf(p);
    for (int i = 0; i < 64; ++i) {
        ASSERT_EQ(p.a->post_recv(buf.a.data() + 2048, 64, buf.ma, 0), 0);
        ASSERT_EQ(p.b->post_recv(buf.b.data() + 2048, 64, buf.mb, 0), 0);
    }
    std::atomic<bool> stop{false};
    // b answers every Send of a; b's thread and the hog share one CPU.
    std::thread hog([&] {
        pthread_setaffinity_np(pthread_self(), sizeof one, &one);
        while (!stop.load(std::memory_order_relaxed)) {
        }
    });
    std::atomic<long> preempted{0};
    std::thread tb([&] {
        pthread_setaffinity_np(pthread_self(), sizeof one, &one);
        Completion wc[4];
        while (!stop.load(std::memory_order_relaxed)) {
            if (p.b->rcq->poll(wc, 1) != 1) continue;
            p.b->post_recv(buf.b.data() + 2048, 64, buf.mb, 0);
            p.b->post_send(WrOpcode::send, buf.b.data(), 8, buf.mb, 0, 0, 0, 0);
            while (p.b->scq->poll(wc, 4) > 0) {
            }
        }
        rusage ru{};
        getrusage(RUSAGE_THREAD, &ru);
        preempted = ru.ru_nivcsw;
    });
    Completion wc[4];
    const auto end = std::chrono::steady_clock::now() + 600ms;
    while (std::chrono::steady_clock::now() < end) {
        ASSERT_EQ(p.a->post_send(WrOpcode::send, buf.a.data(), 8, buf.ma, 0, 0, 0, 0), 0);
        int got = 0;
        const auto limit = std::chrono::steady_clock::now() + 5s;
        while (got == 0 && std::chrono::steady_clock::now() < limit) got = p.a->rcq->poll(wc, 1);
        ASSERT_EQ(got, 1);
        ASSERT_EQ(p.a->post_recv(buf.a.data() + 2048, 64, buf.ma, 0), 0);
        while (p.a->scq->poll(wc, 4) > 0) {
        }
    }
    stop = true;
    tb.join();
    hog.join();
    // The scenario happened: the poller lost its CPU to the hog many times
    // (each slice a millisecond or more, longer than a lease tick).
    EXPECT_GT(preempted.load(), 20);
    // Judging every quiet tick a walk-away costs 5-6 lapses in this run.
    // One is tolerated: under heavier contention than the hog alone (the
    // shuffled suite: 448 preemptions against about 80) a tick now and then
    // finds the poller asleep on a lock or waiting past max_wait_ticks.
    EXPECT_LE(p.b->qp->counters().rx_poll_lease_lapses.load(), 1u) << "preempted " << preempted.load();
}

}  // namespace
}  // namespace iwemu::test
