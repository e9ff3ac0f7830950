// Posted work requests gathered into one sendmsg() (key tx_coalesce,
// IWEMU_TX_COALESCE; emulator/tx_coalesce.cpp): a burst of small Sends posted
// without polling takes far fewer system calls and arrives intact and in
// order; what waits leaves on a poll, on arming a CQ, or by the engine
// timer when the application makes no verbs call at all; a ping-pong or a
// paced sender never waits; the setting turns it off.
#include <gtest/gtest.h>

#include <chrono>
#include <cstring>
#include <functional>
#include <string>
#include <thread>
#include <vector>

#include "tests/emulator/qp_loopback_fixture.h"

namespace iwemu::test {
namespace {

using namespace std::chrono_literals;

constexpr uint32_t msg_len = 4096;

// The buffers outlive the QPs: what the engine thread sends is read from
// them until the QP is gone (nothing here polls every send completion).
struct Burst {
    std::vector<uint8_t> src, dst;
    LoopbackPair p;
    MemoryRegion *smr, *dmr;
    explicit Burst(int n, const PairOptions& o = {})
        : src(size_t{msg_len} * n), dst(size_t{msg_len} * n, 0), p(o)
    {
        fill_pattern(src, 5);
        smr = p.a->reg(src.data(), src.size());
        dmr = p.b->reg(dst.data(), dst.size());
        for (int i = 0; i < n; ++i)
            EXPECT_EQ(p.b->post_recv(dst.data() + size_t{msg_len} * i, msg_len, dmr, 100 + i), 0);
    }
    // Posts Sends i..j-1 back to back, without polling.
    void post(int i, int j)
    {
        for (; i < j; ++i)
            ASSERT_EQ(p.a->post_send(WrOpcode::send, src.data() + size_t{msg_len} * i, msg_len, smr, i), 0);
    }
    // Every Send arrived in order, into its own receive.
    void expect_delivered(int n, std::chrono::milliseconds timeout = 10s)
    {
        const auto wc = p.b->wait(p.b->rcq, n, timeout);
        ASSERT_EQ(wc.size(), static_cast<size_t>(n));
        for (int i = 0; i < n; ++i) {
            EXPECT_EQ(wc[i].status, WcStatus::success);
            EXPECT_EQ(wc[i].wr_id, uint64_t(100 + i));
            EXPECT_EQ(wc[i].byte_len, msg_len);
        }
        EXPECT_EQ(0, std::memcmp(src.data(), dst.data(), src.size()));
    }
    uint64_t sendmsgs() const { return p.a->qp->counters().tx_syscalls.load(); }
    uint64_t fpdus() const { return p.a->qp->counters().tx_fpdus.load(); }
};

TEST(TxCoalesce, SettingDefaultsOnAndTurnsOff)
{
    Config c;
    std::string err;
    EXPECT_TRUE(c.tx_coalesce);
    EXPECT_TRUE(c.set("tx_coalesce", "0", &err)) << err;
    EXPECT_FALSE(c.tx_coalesce);
    EXPECT_FALSE(c.set("tx_coalesce", "sometimes", &err));
    EXPECT_NE(err.find("tx_coalesce"), std::string::npos) << err;
}

// Posts n Sends back to back, polls their completions, checks delivery;
// returns the sendmsg() calls they took.
uint64_t burst_calls(int n, bool coalesce)
{
    PairOptions o;
    o.config.tx_coalesce = coalesce;
    Burst b(n, o);
    const uint64_t before = b.sendmsgs();
    b.post(0, n);
    const auto done = b.p.a->wait(b.p.a->scq, n);  // polls: what waits leaves
    EXPECT_EQ(done.size(), static_cast<size_t>(n));
    for (size_t i = 0; i < done.size(); ++i) EXPECT_EQ(done[i].wr_id, uint64_t(i));
    b.expect_delivered(n);
    return b.sendmsgs() - before;
}

TEST(TxCoalesce, ABurstOfSmallSendsTakesFewSystemCallsAndArrivesInOrder)
{
    constexpr int n = 96;
    // 8 one by one, then batches of 16; a slow moment (sanitizers, a busy
    // host) breaks a burst into more: then try again.
    uint64_t calls = UINT64_MAX;
    for (int attempt = 0; attempt < 5 && calls > uint64_t{n} / 2; ++attempt) {
        calls = burst_calls(n, true);
        if (HasFailure()) return;
    }
    EXPECT_LE(calls, uint64_t{n} / 2);
    EXPECT_GE(burst_calls(n, false), uint64_t{n});
}

// Work held back leaves within the engine timer even if the application
// never calls into verbs again (it might be spinning on memory).
TEST(TxCoalesce, HeldBackWorkLeavesWithoutAnyVerbsCall)
{
    constexpr int n = 28;  // 8 sent at once, a batch of 16, 4 held back
    bool held = false;
    // A slow moment (sanitizers) may break the burst: then try again.
    for (int attempt = 0; attempt < 6 && !held; ++attempt) {
        Burst b(n);
        const uint64_t before = b.fpdus();
        ASSERT_NO_FATAL_FAILURE(b.post(0, n));
        held = b.fpdus() - before < uint64_t{n};  // unless this thread slept through the timer
        ASSERT_NO_FATAL_FAILURE(b.expect_delivered(n, 2s));
    }
    EXPECT_TRUE(held) << "no attempt held a Send back";
}

TEST(TxCoalesce, ArmingTheSendCqSendsWhatWaits)
{
    constexpr int n = 28;
    bool checked = false;
    for (int attempt = 0; attempt < 6 && !checked; ++attempt) {
        Burst b(n);
        LoopbackPair& p = b.p;
        const uint64_t before = b.fpdus();
        ASSERT_NO_FATAL_FAILURE(b.post(0, n));
        if (b.fpdus() - before == uint64_t{n}) continue;  // nothing held (or the timer was first): again
        ASSERT_EQ(p.a->scq->req_notify(false), 0);
        EXPECT_EQ(b.fpdus() - before, uint64_t{n});
        ASSERT_NO_FATAL_FAILURE(b.expect_delivered(n));
        checked = true;
    }
    EXPECT_TRUE(checked);
}

// Posts n Sends one at a time, `between` after each: every one leaves in
// its own post, nothing waits for a batch.
void expect_each_post_sent_at_once(int n, uint32_t flags, const std::function<void(Burst&)>& between)
{
    Burst b(n);
    for (int i = 0; i < n; ++i) {
        const uint64_t before = b.fpdus();
        ASSERT_EQ(b.p.a->post_send(WrOpcode::send, b.src.data() + size_t{msg_len} * i, msg_len, b.smr, i, 0, 0, flags),
                  0);
        EXPECT_EQ(b.fpdus() - before, 1u) << i;
        between(b);
        if (::testing::Test::HasFatalFailure()) return;
    }
    b.expect_delivered(n);
}

// A sender that paces its posts, never polling (unsignaled Sends, a reply
// watched elsewhere).
TEST(TxCoalesce, APacedSenderNeverWaits)
{
    expect_each_post_sent_at_once(24, 0, [](Burst&) { std::this_thread::sleep_for(200us); });
}

// One post, then a poll (a latency loop, or a sender waiting for each
// completion).
TEST(TxCoalesce, APingPongNeverWaits)
{
    expect_each_post_sent_at_once(40, send_signaled,
                                  [](Burst& b) { ASSERT_EQ(b.p.a->wait(b.p.a->scq, 1).size(), 1u); });
}

// A ping-pong whose application waits for the reply without a verbs call
// (ib_write_lat spins on memory; here the test watches A's receive
// counter).  With the gap made endless, only the replies arriving between
// the posts keep them from counting as a burst.
TEST(TxCoalesce, APingPongWaitingWithoutVerbsCallsNeverWaits)
{
    constexpr int n = 24;
    std::vector<uint8_t> reply(64, 0x5a), replies(64 * n, 0);  // outlive the QPs
    PairOptions o;
    o.config.tx_coalesce_gap_ns = int64_t{3600} * 1'000'000'000;
    Burst b(n, o);
    MemoryRegion* reply_mr = b.p.b->reg(reply.data(), reply.size());
    MemoryRegion* replies_mr = b.p.a->reg(replies.data(), replies.size());
    for (int i = 0; i < n; ++i) ASSERT_EQ(b.p.a->post_recv(replies.data() + 64 * i, 64, replies_mr, 200 + i), 0);
    const auto& a_rx = b.p.a->qp->counters().rx_fpdus;
    for (int i = 0; i < n; ++i) {
        const uint64_t before = b.fpdus();
        ASSERT_EQ(b.p.a->post_send(WrOpcode::send, b.src.data() + size_t{msg_len} * i, msg_len, b.smr, i, 0, 0, 0),
                  0);
        EXPECT_EQ(b.fpdus() - before, 1u) << i;
        const uint64_t received = a_rx.load();
        ASSERT_EQ(b.p.b->post_send(WrOpcode::send, reply.data(), 64, reply_mr, 300 + i, 0, 0, 0), 0);
        const auto deadline = std::chrono::steady_clock::now() + 5s;
        while (a_rx.load() == received && std::chrono::steady_clock::now() < deadline) std::this_thread::yield();
        ASSERT_GT(a_rx.load(), received) << "reply " << i << " never arrived";
    }
    b.expect_delivered(n);
}

}  // namespace
}  // namespace iwemu::test
