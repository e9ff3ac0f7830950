// The first FPDUs of a connection (emulator/qp/first_fpdus.cpp): a Responder's
// bounded wait for the Initiator, and the zero-length Writes that wake a
// peer whose receive callback missed our first FPDUs (Linux siw).
#include <sys/socket.h>

#include "emulator/wire/ddp_header.h"
#include "qp_loopback_fixture.h"

namespace iwemu::test {
namespace {

using Clock = std::chrono::steady_clock;

// Octets of one zero-length RDMA Write FPDU with CRC: ULPDU_Length, the
// 14-octet tagged header, no pad (16 is a multiple of 4), CRC (RFC 5044 §4.1).
constexpr size_t wakeup_fpdu_size = 2 + 14 + 4;

// Everything the socket delivers within `for_how_long`.
std::vector<uint8_t> read_for(int fd, std::chrono::milliseconds for_how_long)
{
    std::vector<uint8_t> out;
    const auto end = Clock::now() + for_how_long;
    uint8_t buf[4096];
    while (Clock::now() < end) {
        pollfd p{fd, POLLIN, 0};
        if (::poll(&p, 1, 5) <= 0) continue;
        const ssize_t n = ::recv(fd, buf, sizeof buf, MSG_DONTWAIT);
        if (n <= 0) break;
        out.insert(out.end(), buf, buf + n);
    }
    return out;
}

// Everything the socket delivers until `want` octets came or `bound` passed,
// then for `quiet` more: timers run late on a loaded host (TSan, CI).
std::vector<uint8_t> read_at_least(int fd, size_t want, std::chrono::milliseconds quiet,
                                   std::chrono::milliseconds bound = 5000ms)
{
    std::vector<uint8_t> out;
    const auto end = Clock::now() + bound;
    while (out.size() < want && Clock::now() < end) {
        const auto more = read_for(fd, 20ms);
        out.insert(out.end(), more.begin(), more.end());
    }
    const auto tail = read_for(fd, quiet);
    out.insert(out.end(), tail.begin(), tail.end());
    return out;
}

// Waits (bounded) until `qp` sent `n` wake-ups; the steps end at 128 ms,
// but a loaded host runs timers late.
uint64_t wait_for_wakeups(const QueuePair& qp, uint64_t n, std::chrono::milliseconds bound = 5000ms)
{
    const auto end = Clock::now() + bound;
    while (qp.counters().tx_wakeups.load() < n && Clock::now() < end)
        std::this_thread::sleep_for(5ms);
    return qp.counters().tx_wakeups.load();
}

// The wake-up steps (first_fpdus.cpp: 2, 8, 32, 128 ms after the
// connection came up) certainly due after `gap`, the longest the test's
// thread can have taken from the attach to the end of its first post: a
// step due before anything was sent has nothing to wake and sends nothing
// (a thread that lost the CPU for over 2 ms there sees 3).
uint64_t wakeups_due_after(Clock::duration gap)
{
    uint64_t n = 0;
    for (const auto step : {2ms, 8ms, 32ms, 128ms}) n += step > gap;
    return n;
}

bool is_zero_length_write(std::span<const uint8_t> fpdu)
{
    if (fpdu.size() < wakeup_fpdu_size) return false;
    if (fpdu[0] != 0 || fpdu[1] != wire::ddp_tagged_header_size) return false;  // ULPDU_Length
    const auto h = wire::decode_ddp_header(fpdu.subspan(2, wire::ddp_tagged_header_size));
    return h && h->control.tagged && h->control.last &&
           static_cast<wire::RdmapOpcode>(h->rsvdulp0 & 0x0F) == wire::RdmapOpcode::rdma_write;
}

TEST(FirstFpdus, AnInitiatorWakesAPeerThatNeverAnswersFourTimesAfterItsFirstSend)
{
    Config cfg;
    Side a(cfg);
    auto [fa, peer] = tcp_pair();
    ConnectionParams pa;
    pa.fd = fa;
    pa.role = ConnectionRole::initiator;  // client/server mode: no RTR
    std::vector<uint8_t> buf(32, 0x5a);
    auto* mr = a.reg(buf.data(), buf.size());
    const auto attached = Clock::now();
    ASSERT_EQ(a.qp->attach_connection(pa), 0);
    ASSERT_EQ(a.post_send(WrOpcode::send, buf.data(), 32, mr, 1), 0);
    const uint64_t least = wakeups_due_after(Clock::now() - attached);
    ASSERT_EQ(a.wait(a.scq, 1).size(), 1u);

    // The Send, then the steps at 2, 8, 32 and 128 ms, and nothing after.
    const uint64_t wakeups = wait_for_wakeups(*a.qp, 4);
    EXPECT_GE(wakeups, least);
    const size_t send_fpdu = 2 + 18 + 32 + 4;  // untagged header, no pad, CRC
    const std::vector<uint8_t> got = read_at_least(peer, send_fpdu + wakeups * wakeup_fpdu_size, 300ms);
    EXPECT_EQ(a.qp->counters().tx_wakeups.load(), wakeups);
    ASSERT_EQ(got.size(), send_fpdu + wakeups * wakeup_fpdu_size);
    for (size_t i = 0; i < wakeups; ++i)
        EXPECT_TRUE(is_zero_length_write(std::span(got).subspan(send_fpdu + i * wakeup_fpdu_size))) << i;
    ::close(peer);
}

TEST(FirstFpdus, AnEndThatSentNothingSendsNoWakeUp)
{
    Config cfg;
    Side a(cfg);
    auto [fa, peer] = tcp_pair();
    ConnectionParams pa;
    pa.fd = fa;
    pa.role = ConnectionRole::initiator;
    ASSERT_EQ(a.qp->attach_connection(pa), 0);
    EXPECT_TRUE(read_for(peer, 300ms).empty());
    EXPECT_EQ(a.qp->counters().tx_wakeups.load(), 0u);
    ::close(peer);
}

TEST(FirstFpdus, TheWakeUpsCanBeTurnedOff)
{
    Config cfg;
    cfg.peer_wakeup = false;
    Side a(cfg);
    auto [fa, peer] = tcp_pair();
    ConnectionParams pa;
    pa.fd = fa;
    pa.role = ConnectionRole::initiator;
    ASSERT_EQ(a.qp->attach_connection(pa), 0);
    std::vector<uint8_t> buf(32);
    auto* mr = a.reg(buf.data(), buf.size());
    ASSERT_EQ(a.post_send(WrOpcode::send, buf.data(), 32, mr, 1), 0);
    EXPECT_EQ(read_for(peer, 300ms).size(), 2u + 18 + 32 + 4);
    EXPECT_EQ(a.qp->counters().tx_wakeups.load(), 0u);
    ::close(peer);
}

// Between two iwemu ends the Read RTR's Response ends the wake-ups, even when
// the Responder never sends anything itself: none goes out once it arrived.
// It usually arrives before the first step (2 ms) and none goes out at all;
// a slow build (ThreadSanitizer in CI) may see that step first.
TEST(FirstFpdus, TheReadRtrsResponseEndsTheWakeUps)
{
    PairOptions o;
    o.rtr = RtrType::zero_length_read;
    o.config.peer_wakeup = true;
    LoopbackPair p(o);
    std::vector<uint8_t> src(64, 1), dst(64);
    auto* smr = p.a->reg(src.data(), src.size());
    auto* dmr = p.b->reg(dst.data(), dst.size());
    ASSERT_EQ(p.b->post_recv(dst.data(), 64, dmr, 7), 0);
    ASSERT_EQ(p.a->post_send(WrOpcode::send, src.data(), 64, smr, 1), 0);
    ASSERT_EQ(p.b->wait(p.b->rcq, 1).size(), 1u);
    // The Response is the one FPDU the Initiator receives.
    const auto end = std::chrono::steady_clock::now() + 5s;
    while (p.a->qp->counters().rx_fpdus.load() < 1 && std::chrono::steady_clock::now() < end)
        std::this_thread::sleep_for(1ms);
    ASSERT_EQ(p.a->qp->counters().rx_fpdus.load(), 1u);
    std::this_thread::sleep_for(20ms);  // a step that fell due with the Response has gone out
    const uint64_t before_response = p.a->qp->counters().tx_wakeups.load();
    std::this_thread::sleep_for(300ms);  // the 32 and 128 ms steps
    EXPECT_EQ(p.a->qp->counters().tx_wakeups.load(), before_response);
    EXPECT_LE(before_response, 1u);
    EXPECT_EQ(p.b->qp->counters().tx_wakeups.load(), 0u);
    EXPECT_EQ(p.b->qp->counters().rx_fpdus.load(), 2u + before_response);  // the RTR, the wake-ups, the Send
}

// Wake-ups reach an iwemu peer as what they are: nothing.  No completion,
// no error, and the data behind them lands as usual.
TEST(FirstFpdus, AnIwemuPeerAbsorbsWakeUps)
{
    PairOptions o;  // client/server mode: the Initiator cannot tell who reads
    o.config.peer_wakeup = true;
    const auto connecting = Clock::now();
    LoopbackPair p(o);
    std::vector<uint8_t> src(64, 3), dst(64);
    auto* smr = p.a->reg(src.data(), src.size());
    auto* dmr = p.b->reg(dst.data(), dst.size());
    ASSERT_EQ(p.b->post_recv(dst.data(), 64, dmr, 7), 0);
    ASSERT_EQ(p.b->post_recv(dst.data(), 64, dmr, 8), 0);
    ASSERT_EQ(p.a->post_send(WrOpcode::send, src.data(), 64, smr, 1), 0);
    const uint64_t least = wakeups_due_after(Clock::now() - connecting);
    const uint64_t wakeups = wait_for_wakeups(*p.a->qp, 4);
    EXPECT_GE(wakeups, least);
    std::this_thread::sleep_for(200ms);  // and no more
    EXPECT_EQ(p.a->qp->counters().tx_wakeups.load(), wakeups);
    ASSERT_EQ(p.a->post_send(WrOpcode::send, src.data(), 64, smr, 2), 0);
    const auto r = p.b->wait(p.b->rcq, 2);
    ASSERT_EQ(r.size(), 2u);
    EXPECT_EQ(r[0].wr_id, 7u);
    EXPECT_EQ(r[1].wr_id, 8u);
    EXPECT_EQ(p.b->qp->state(), QpState::rts);
    EXPECT_TRUE(p.b->wait(p.b->rcq, 1, 50ms).empty());
}

// Client/server mode, an Initiator that sends nothing (stock siw), an
// application whose server speaks first (ib_write_lat): the Responder's
// Send leaves after responder_wait_ms, not never.
TEST(FirstFpdus, AResponderSendsFirstOnceItsWaitForTheInitiatorEnds)
{
    Config cfg;
    cfg.responder_wait_ms = 40;
    Side b(cfg);
    auto [peer, fb] = tcp_pair();
    ConnectionParams pb;
    pb.fd = fb;
    pb.role = ConnectionRole::responder;
    const auto t0 = Clock::now();
    ASSERT_EQ(b.qp->attach_connection(pb), 0);
    std::vector<uint8_t> buf(32, 0x11);
    auto* mr = b.reg(buf.data(), buf.size());
    ASSERT_EQ(b.post_send(WrOpcode::send, buf.data(), 32, mr, 1), 0);
    uint8_t first[64];
    pollfd pf{peer, POLLIN, 0};
    ASSERT_EQ(::poll(&pf, 1, 5000), 1);
    const auto waited = Clock::now() - t0;
    EXPECT_GE(waited, 40ms);
    EXPECT_GT(::recv(peer, first, sizeof first, 0), 0);
    // It spoke first, so it also wakes the Initiator up.
    EXPECT_EQ(wait_for_wakeups(*b.qp, 4), 4u);
    read_for(peer, 200ms);  // and no fifth
    EXPECT_EQ(b.qp->counters().tx_wakeups.load(), 4u);
    ::close(peer);
}

// In peer-to-peer mode the RTR always comes: the Responder waits for it.
TEST(FirstFpdus, APeerToPeerResponderWaitsForTheRtrBeyondItsWait)
{
    Config cfg;
    cfg.responder_wait_ms = 10;
    Side b(cfg);
    auto [peer, fb] = tcp_pair();
    ConnectionParams pb;
    pb.fd = fb;
    pb.role = ConnectionRole::responder;
    pb.rtr = RtrType::zero_length_write;
    ASSERT_EQ(b.qp->attach_connection(pb), 0);
    std::vector<uint8_t> buf(32);
    auto* mr = b.reg(buf.data(), buf.size());
    ASSERT_EQ(b.post_send(WrOpcode::send, buf.data(), 32, mr, 1), 0);
    EXPECT_TRUE(read_for(peer, 200ms).empty());
    ::close(peer);
}

}  // namespace
}  // namespace iwemu::test
