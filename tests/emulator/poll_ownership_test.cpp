// Poll ownership of the receive path (emulator/rx_poll_owner.cpp): a thread
// that keeps polling an empty CQ takes EPOLLIN away from the engine thread
// and reads arriving FPDUs itself; the engine gets the receive path back on a
// completion returned, on req_notify, and when the polls stop (lease), so
// nothing waits on a poller that went away.
#include <atomic>
#include <chrono>
#include <cstring>
#include <thread>
#include <vector>

#include "tests/emulator/qp_loopback_fixture.h"

namespace iwemu::test {
namespace {

constexpr int kTakeAfter = 8;  // empty polls, comfortably above the CQ's threshold

void poll_empty(CompletionQueue* cq, int times)
{
    Completion wc[4];
    for (int i = 0; i < times; ++i) ASSERT_EQ(cq->poll(wc, 4), 0);
}

// Wait without polling (a poll would run the receive path itself).
bool wait_size(CompletionQueue* cq, uint32_t n, std::chrono::milliseconds timeout)
{
    const auto end = std::chrono::steady_clock::now() + timeout;
    while (cq->size() < n && std::chrono::steady_clock::now() < end) std::this_thread::sleep_for(200us);
    return cq->size() >= n;
}

struct Buffers {
    std::vector<uint8_t> a = std::vector<uint8_t>(4096), b = std::vector<uint8_t>(4096);
    MemoryRegion* ma = nullptr;
    MemoryRegion* mb = nullptr;
    explicit Buffers(LoopbackPair& p) : ma(p.a->reg(a.data(), a.size())), mb(p.b->reg(b.data(), b.size())) {}
};

TEST(PollOwnership, EmptyPollsTakeTheReceivePathAndTheCompletionGivesItBack)
{
    LoopbackPair p;
    Buffers buf(p);
    ASSERT_EQ(p.b->post_recv(buf.b.data(), 64, buf.mb, 7), 0);
    EXPECT_FALSE(p.b->qp->rx_poll_owned());
    poll_empty(p.b->rcq, kTakeAfter);
    EXPECT_TRUE(p.b->qp->rx_poll_owned());

    std::memcpy(buf.a.data(), "ping", 4);
    ASSERT_EQ(p.a->post_send(WrOpcode::send, buf.a.data(), 4, buf.ma, 1), 0);
    const auto got = p.b->wait(p.b->rcq, 1, 5s);
    ASSERT_EQ(got.size(), 1u);
    EXPECT_EQ(got[0].wr_id, 7u);
    EXPECT_EQ(got[0].status, WcStatus::success);
    EXPECT_EQ(std::memcmp(buf.b.data(), "ping", 4), 0);
    // The poller read the Send itself: the engine never ran a receive pass
    // for it (it had no EPOLLIN for this socket).
    EXPECT_EQ(p.b->qp->counters().rx_engine_passes.load(), 0u);
    EXPECT_FALSE(p.b->qp->rx_poll_owned());  // a completion returned: back to the engine
}

TEST(PollOwnership, ReqNotifyGivesTheReceivePathBackAndTheEventFires)
{
    LoopbackPair p;
    Buffers buf(p);
    std::atomic<int> events{0};
    p.b->rcq->set_event_handler([&] { events.fetch_add(1); });
    ASSERT_EQ(p.b->post_recv(buf.b.data(), 64, buf.mb, 1), 0);
    poll_empty(p.b->rcq, kTakeAfter);
    ASSERT_TRUE(p.b->qp->rx_poll_owned());

    ASSERT_EQ(p.b->rcq->req_notify(false), 0);
    EXPECT_FALSE(p.b->qp->rx_poll_owned());
    ASSERT_EQ(p.a->post_send(WrOpcode::send, buf.a.data(), 16, buf.ma, 1), 0);
    // Nobody polls: the engine thread receives and the armed CQ signals.
    ASSERT_TRUE(wait_size(p.b->rcq, 1, 5s));
    EXPECT_EQ(events.load(), 1);
    EXPECT_GT(p.b->qp->counters().rx_engine_passes.load(), 0u);
}

TEST(PollOwnership, APollerThatStopsDoesNotStrandASend)
{
    LoopbackPair p;
    Buffers buf(p);
    ASSERT_EQ(p.b->post_recv(buf.b.data(), 64, buf.mb, 1), 0);
    poll_empty(p.b->rcq, kTakeAfter);
    ASSERT_TRUE(p.b->qp->rx_poll_owned());

    // The poller walks away without a completion or req_notify.
    ASSERT_EQ(p.a->post_send(WrOpcode::send, buf.a.data(), 32, buf.ma, 1), 0);
    const auto t0 = std::chrono::steady_clock::now();
    ASSERT_TRUE(wait_size(p.b->rcq, 1, 5s)) << "the receive path stayed with a thread that stopped polling";
    // The lease is a few milliseconds; allow for a loaded machine.
    EXPECT_LT(std::chrono::steady_clock::now() - t0, 1s);
    EXPECT_FALSE(p.b->qp->rx_poll_owned());
}

TEST(PollOwnership, APollerThatStopsDoesNotStrandAnRdmaWriteIntoMemoryItWatches)
{
    LoopbackPair p;
    Buffers buf(p);
    // Like ib_write_lat: the target polls its send CQ, then spins on memory.
    poll_empty(p.b->scq, kTakeAfter);
    ASSERT_TRUE(p.b->qp->rx_poll_owned());

    std::memset(buf.a.data(), 0x5a, 256);
    ASSERT_EQ(p.a->post_send(WrOpcode::rdma_write, buf.a.data(), 256, buf.ma, 1,
                             reinterpret_cast<uint64_t>(buf.b.data()), buf.mb->rkey()),
              0);
    // Watch the QP's counter, not the memory (that would race with the
    // placement as far as ThreadSanitizer can tell).
    const auto end = std::chrono::steady_clock::now() + 5s;
    while (p.b->qp->counters().rx_fpdus.load() < 1 && std::chrono::steady_clock::now() < end)
        std::this_thread::sleep_for(100us);
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
    Buffers buf(p);
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
    std::atomic<bool> ok_b{false};
    std::thread tb([&] { ok_b = side(*p.b, buf.mb, buf.b.data(), false); });
    const bool ok_a = side(*p.a, buf.ma, buf.a.data(), true);
    tb.join();
    ASSERT_TRUE(ok_a);
    ASSERT_TRUE(ok_b.load());
    // Without poll ownership every message wakes the engine thread (one
    // receive pass per message); with it, the pollers read nearly all of them.
    // Generous bound: a poller descheduled on a loaded machine lets its lease
    // lapse and the engine take over for a while.
    EXPECT_LT(p.a->qp->counters().rx_engine_passes.load(), rounds / 2u);
    EXPECT_LT(p.b->qp->counters().rx_engine_passes.load(), rounds / 2u);
}

TEST(PollOwnership, ASmallMessageCostsOneReadWhenTheSocketHoldsJustIt)
{
    LoopbackPair p;
    Buffers buf(p);
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

}  // namespace
}  // namespace iwemu::test
