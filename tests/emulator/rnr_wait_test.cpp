// The RNR wait (emulator/qp/rx_rnr_wait.cpp): a Send that finds no receive
// posted stalls the stream until one is posted (RQ or SRQ), for at most
// rnr_wait_ms; then the Terminate DDP 1/2/0x02 goes out as without the wait.
// Two emulators over loopback TCP, as every component test.
#include <cstring>

#include "tests/emulator/qp_loopback_fixture.h"

namespace iwemu::test {
namespace {

using wire::TerminateCode;
using wire::TerminateLayer;

constexpr TerminateCode no_buffer{TerminateLayer::ddp, wire::etype::ddp_untagged_buffer,
                                  wire::ecode::ddp_untagged_invalid_msn_no_buffer};

struct Buffers {
    std::vector<uint8_t> src, dst;
    MemoryRegion* smr;
    MemoryRegion* dmr;
    Buffers(Side& a, Side& b, size_t n) : src(n), dst(n)
    {
        fill_pattern(src, 7);
        smr = a.reg(src.data(), src.size());
        dmr = b.reg(dst.data(), dst.size());
    }
};

// The receiver is parked (the Send's header read, nothing placed) until the
// receive is posted; then the message lands whole and nothing failed.
TEST(RnrWait, SendBeforeReceiveWaitsThenLands)
{
    LoopbackPair p(with_rnr_wait(10000));
    Buffers b(*p.a, *p.b, 64 * 1024);
    ASSERT_EQ(p.a->post_send(WrOpcode::send, b.src.data(), 64 * 1024, b.smr, 1), 0);
    ASSERT_TRUE(wait_until([&] { return p.b->qp->counters().rx_rnr_waits.load() == 1; }, 5s));
    std::this_thread::sleep_for(200ms);  // parked, not failed
    EXPECT_EQ(p.b->qp->state(), QpState::rts);
    EXPECT_TRUE(p.b->rcq->size() == 0);
    EXPECT_EQ(b.dst[0], 0);
    ASSERT_EQ(p.b->post_recv(b.dst.data(), 64 * 1024, b.dmr, 9), 0);
    const auto r = p.b->wait(p.b->rcq, 1, 5s);
    ASSERT_EQ(r.size(), 1u);
    EXPECT_EQ(r[0].wr_id, 9u);
    EXPECT_EQ(r[0].status, WcStatus::success);
    EXPECT_EQ(r[0].byte_len, 64u * 1024);
    EXPECT_EQ(b.dst, b.src);
    const auto s = p.a->wait(p.a->scq, 1, 5s);
    ASSERT_EQ(s.size(), 1u);
    EXPECT_EQ(s[0].status, WcStatus::success);
    EXPECT_FALSE(p.b->qp->last_terminate_sent().valid);
    EXPECT_EQ(p.a->qp->state(), QpState::rts);
    EXPECT_EQ(p.b->qp->state(), QpState::rts);
}

// Nothing posted in time: the same Terminate as without the wait, after it.
TEST(RnrWait, NothingPostedEndsInTerminate)
{
    LoopbackPair p(with_rnr_wait(300));
    Buffers b(*p.a, *p.b, 4096);
    const auto t0 = std::chrono::steady_clock::now();
    ASSERT_EQ(p.a->post_send(WrOpcode::send, b.src.data(), 100, b.smr, 1), 0);
    ASSERT_TRUE(p.b->wait_state(QpState::err, 5s));
    const auto waited = std::chrono::steady_clock::now() - t0;
    EXPECT_GE(waited, 290ms);
    EXPECT_EQ(p.b->qp->counters().rx_rnr_waits.load(), 1u);
    ASSERT_TRUE(p.a->wait_state(QpState::err, 5s));
    const auto sent = p.b->qp->last_terminate_sent();
    const auto got = p.a->qp->last_terminate_received();
    ASSERT_TRUE(sent.valid);
    ASSERT_TRUE(got.valid);
    EXPECT_EQ(sent.code, no_buffer);
    EXPECT_EQ(got.code, no_buffer);
    EXPECT_TRUE(p.b->events.wait_async(AsyncEventType::qp_fatal));
    EXPECT_TRUE(p.a->events.wait_async(AsyncEventType::qp_fatal));
    EXPECT_TRUE(p.b->events.wait_conn(QpConnectionEvent::terminated));
    EXPECT_TRUE(p.a->events.wait_conn(QpConnectionEvent::terminated));
    // The receive posted too late is flushed, not filled.
    ASSERT_EQ(p.b->post_recv(b.dst.data(), 4096, b.dmr, 5), 0);
    const auto r = p.b->wait(p.b->rcq, 1, 5s);
    ASSERT_EQ(r.size(), 1u);
    EXPECT_EQ(r[0].status, WcStatus::wr_flush_err);
    EXPECT_EQ(b.dst[0], 0);
}

// rnr_wait_ms = 0 is Linux siw's behaviour: no wait at all.
TEST(RnrWait, ZeroMeansTerminateAtOnce)
{
    LoopbackPair p(with_rnr_wait(0));
    Buffers b(*p.a, *p.b, 4096);
    ASSERT_EQ(p.a->post_send(WrOpcode::send, b.src.data(), 100, b.smr, 1), 0);
    ASSERT_TRUE(p.b->wait_state(QpState::err, 5s));
    EXPECT_EQ(p.b->qp->counters().rx_rnr_waits.load(), 0u);
    EXPECT_EQ(p.b->qp->last_terminate_sent().code, no_buffer);
}

// Moving the parked QP to ERROR ends the wait at once (the stream is
// aborted as for any QP moved to ERROR), not after the 60 s.
TEST(RnrWait, ModifyToErrorEndsTheWait)
{
    LoopbackPair p(with_rnr_wait(60000));
    Buffers b(*p.a, *p.b, 4096);
    ASSERT_EQ(p.a->post_send(WrOpcode::send, b.src.data(), 100, b.smr, 1), 0);
    ASSERT_TRUE(wait_until([&] { return p.b->qp->counters().rx_rnr_waits.load() == 1; }, 5s));
    QpAttr a;
    a.qp_state = QpState::err;
    ASSERT_EQ(p.b->qp->modify(a, qp_attr_state), 0);
    EXPECT_EQ(p.b->qp->state(), QpState::err);
    EXPECT_TRUE(p.a->wait_state(QpState::err, 5s));
}

// A stream of Sends much larger than every buffer on the way, with the
// receiver posting late and a few receives at a time: TCP back-pressure
// does the flow control, everything lands in order, nothing fails.
TEST(RnrWait, UnthrottledSenderSlowReceiver)
{
    LoopbackPair p(with_rnr_wait(10000));
    constexpr uint32_t msg = 64 * 1024;
    constexpr int count = 200;  // 12.5 MiB: more than both socket buffers
    std::vector<uint8_t> src(msg * 4), dst(static_cast<size_t>(msg) * count);
    fill_pattern(src, 3);
    MemoryRegion* smr = p.a->reg(src.data(), src.size());
    MemoryRegion* dmr = p.b->reg(dst.data(), dst.size());
    std::atomic<bool> stop{false};
    std::thread sender([&] {
        int posted = 0, done = 0;
        while (done < count && !stop) {
            while (posted < count && posted - done < 64) {
                const uint32_t off = (posted % 4) * msg;
                if (p.a->post_send(WrOpcode::send, src.data() + off, msg, smr, static_cast<uint64_t>(posted)) != 0)
                    break;
                ++posted;
            }
            Completion wc[32];
            const int n = p.a->scq->poll(wc, 32);
            for (int i = 0; i < n; ++i) {
                if (wc[i].status != WcStatus::success) stop = true;
                ++done;
            }
            if (n == 0) std::this_thread::sleep_for(50us);
        }
    });
    int received = 0, posted = 0;
    const auto end = std::chrono::steady_clock::now() + 60s;
    std::this_thread::sleep_for(100ms);  // let the first Sends find nothing
    while (received < count && std::chrono::steady_clock::now() < end && p.b->qp->state() == QpState::rts) {
        for (int k = 0; k < 3 && posted < count; ++k, ++posted)
            ASSERT_EQ(p.b->post_recv(dst.data() + static_cast<size_t>(posted) * msg, msg, dmr,
                                     static_cast<uint64_t>(posted)),
                      0);
        const auto r = p.b->wait(p.b->rcq, static_cast<size_t>(posted - received), 5s);
        for (const Completion& c : r) {
            ASSERT_EQ(c.status, WcStatus::success);
            ASSERT_EQ(c.wr_id, static_cast<uint64_t>(received));
            ++received;
        }
        std::this_thread::sleep_for(2ms);  // the slow receiver
    }
    stop = true;
    sender.join();
    ASSERT_EQ(received, count);
    for (int i = 0; i < count; ++i)
        ASSERT_EQ(std::memcmp(dst.data() + static_cast<size_t>(i) * msg, src.data() + (i % 4) * msg, msg), 0)
            << "message " << i;
    EXPECT_GT(p.b->qp->counters().rx_rnr_waits.load(), 0u);
    EXPECT_FALSE(p.b->qp->last_terminate_sent().valid);
}

// The same wait on a QP whose receives come from an SRQ.
TEST(RnrWait, SrqPostResumesTheReceiver)
{
    Config cfg;
    cfg.rnr_wait_ms = 10000;
    Side a(cfg);
    Side b(cfg);
    SharedReceiveQueue* srq = nullptr;
    ASSERT_EQ(b.emu->create_srq(b.pd, SrqAttr{16, 1, 0}, &srq), 0);
    QpInitAttr ia;
    ia.send_cq = b.scq;
    ia.recv_cq = b.rcq;
    ia.srq = srq;
    ia.cap = {16, 0, 1, 1, 0};
    QueuePair* qp = nullptr;
    ASSERT_EQ(b.emu->create_qp(b.pd, ia, &qp), 0);
    QpAttr init;
    init.qp_state = QpState::init;
    init.qp_access_flags = access_local_write;
    ASSERT_EQ(qp->modify(init, qp_attr_state | qp_attr_access_flags), 0);
    ASSERT_EQ(attach_tcp_pair(a.qp, qp), 0);

    Buffers buf(a, b, 8192);
    ASSERT_EQ(a.post_send(WrOpcode::send, buf.src.data(), 8192, buf.smr, 1), 0);
    ASSERT_TRUE(wait_until([&] { return qp->counters().rx_rnr_waits.load() == 1; }, 5s));
    Sge sge{reinterpret_cast<uint64_t>(buf.dst.data()), 8192, buf.dmr->lkey()};
    RecvWr wr{42, &sge, 1};
    size_t bad;
    ASSERT_EQ(srq->post_recv(&wr, 1, &bad), 0);
    const auto r = b.wait(b.rcq, 1, 5s);
    ASSERT_EQ(r.size(), 1u);
    EXPECT_EQ(r[0].wr_id, 42u);
    EXPECT_EQ(r[0].status, WcStatus::success);
    EXPECT_EQ(buf.dst, buf.src);
    EXPECT_EQ(qp->state(), QpState::rts);
    ASSERT_EQ(b.emu->destroy_qp(qp), 0);
}

TEST(RnrWait, ConfigKey)
{
    Config c;
    std::string err;
    EXPECT_TRUE(c.set("rnr_wait_ms", "0", &err));
    EXPECT_EQ(c.rnr_wait_ms, 0u);
    EXPECT_TRUE(c.set("rnr_wait_ms", "250", &err));
    EXPECT_EQ(c.rnr_wait_ms, 250u);
    EXPECT_FALSE(c.set("rnr_wait_ms", "-1", &err));
    EXPECT_FALSE(c.set("rnr_wait_ms", "9999999", &err));
    EXPECT_EQ(c.rnr_wait_ms, 250u);
}

}  // namespace
}  // namespace iwemu::test
