// Disconnect against an RNR wait (QueuePair::close_locked, rx_rnr_wait.cpp):
// a close never waits for the peer's rnr_wait_ms.  The sender's disconnect
// during a transmission flushes and drops the connection (kernel siw's
// RTS -> CLOSING rule); a sender with nothing in transmission sends its FIN,
// which ends the parked receiver's wait; a parked receiver's own disconnect
// drops the connection.  rnr_wait_ms is 60 s here: every bound below is
// far under it.  Two emulators over loopback TCP.
#include <linux/sockios.h>
#include <sys/ioctl.h>

#include "tests/emulator/qp_loopback_fixture.h"

namespace iwemu::test {
namespace {

using wire::TerminateCode;
using wire::TerminateLayer;

constexpr TerminateCode no_buffer{TerminateLayer::ddp, wire::etype::ddp_untagged_buffer,
                                  wire::ecode::ddp_untagged_invalid_msn_no_buffer};
constexpr auto long_wait = 60000;  // rnr_wait_ms
constexpr auto prompt = 5s;        // "at once" on a loaded 2-core machine

std::chrono::milliseconds since(std::chrono::steady_clock::time_point t0)
{
    return std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() - t0);
}

// The receiver has no receive posted and parks on the first Send; the
// sender keeps posting until TCP holds no more (backlog in the SQ).
struct ParkedStream {
    static constexpr uint32_t msg = 64 * 1024;
    static constexpr int count = 200;  // 12.5 MiB: more than both socket buffers
    LoopbackPair p{with_rnr_wait(long_wait)};
    std::vector<uint8_t> src = std::vector<uint8_t>(msg);
    MemoryRegion* smr = p.a->reg(src.data(), src.size());

    ParkedStream()
    {
        fill_pattern(src, 5);
        for (int i = 0; i < count; ++i)
            EXPECT_EQ(p.a->post_send(WrOpcode::send, src.data(), msg, smr, static_cast<uint64_t>(i)), 0);
        EXPECT_TRUE(wait_until([&] { return p.b->qp->counters().rx_rnr_waits.load() == 1; }, prompt));
        // Let TCP fill up: the stream is stalled on the receiver's closed window.
        std::this_thread::sleep_for(300ms);
    }
};

// The sender's completions: all `count`, in posting order, successes (fully
// handed to TCP before the close) then flushes, at least one of them.
void expect_flushed_in_order(Side& s, int count)
{
    const auto wc = s.wait(s.scq, static_cast<size_t>(count), prompt);
    ASSERT_EQ(wc.size(), static_cast<size_t>(count));
    int flushed = 0;
    for (int i = 0; i < count; ++i) {
        EXPECT_EQ(wc[i].wr_id, static_cast<uint64_t>(i));
        EXPECT_EQ(wc[i].opcode, WcOpcode::send);
        if (wc[i].status == WcStatus::wr_flush_err) {
            ++flushed;
        } else {
            EXPECT_EQ(wc[i].status, WcStatus::success) << "wr " << i;
            EXPECT_EQ(flushed, 0) << "success after a flush: wr " << i;
        }
    }
    EXPECT_GT(flushed, 0);
}

// The receiver's end: prompt, RQ flushed (a late receive too), nothing placed.
void expect_receiver_closed(Side& r, std::chrono::steady_clock::time_point t0)
{
    ASSERT_TRUE(r.wait_state(QpState::err, prompt));
    EXPECT_LT(since(t0), prompt);
    // ERR comes first; the socket closes once the Terminate has left.
    EXPECT_TRUE(wait_until([&] { return !r.qp->connected(); }, prompt));
    std::vector<uint8_t> late(64);
    MemoryRegion* mr = r.reg(late.data(), late.size());
    ASSERT_EQ(r.post_recv(late.data(), 64, mr, 77), 0);
    const auto wc = r.wait(r.rcq, 1, prompt);
    ASSERT_EQ(wc.size(), 1u);
    EXPECT_EQ(wc[0].wr_id, 77u);
    EXPECT_EQ(wc[0].status, WcStatus::wr_flush_err);
}

// rdma_disconnect's DISCONNECT: a transmission is cut, not drained.
TEST(RnrDisconnect, SenderDisconnectDuringTransmissionDropsAtOnce)
{
    ParkedStream s;
    const auto t0 = std::chrono::steady_clock::now();
    s.p.a->qp->disconnect();
    EXPECT_EQ(s.p.a->qp->state(), QpState::err);
    EXPECT_FALSE(s.p.a->qp->connected());
    EXPECT_TRUE(s.p.a->events.wait_conn(QpConnectionEvent::peer_closed, prompt));
    expect_flushed_in_order(*s.p.a, ParkedStream::count);
    // The RST reaches the parked receiver: connection lost, no Terminate.
    expect_receiver_closed(*s.p.b, t0);
    EXPECT_TRUE(s.p.b->events.wait_conn(QpConnectionEvent::connection_error, prompt));
    EXPECT_FALSE(s.p.b->qp->last_terminate_sent().valid);
    EXPECT_FALSE(s.p.a->qp->last_terminate_received().valid);
}

// librdmacm's rdma_disconnect moves an iWARP QP to SQD first: the same rule.
TEST(RnrDisconnect, ModifyToSqdDuringTransmissionDropsAtOnce)
{
    ParkedStream s;
    const auto t0 = std::chrono::steady_clock::now();
    QpAttr a;
    a.qp_state = QpState::sqd;
    ASSERT_EQ(s.p.a->qp->modify(a, qp_attr_state), 0);
    EXPECT_EQ(s.p.a->qp->state(), QpState::err);
    s.p.a->qp->disconnect();  // the CM's DISCONNECT after it: nothing left to do
    expect_flushed_in_order(*s.p.a, ParkedStream::count);
    expect_receiver_closed(*s.p.b, t0);
}

// Nothing in transmission: FIN as ever.  It queues behind the parked Send;
// the receiver hears it (EPOLLRDHUP without read interest) and stops
// waiting: the Send fails as at the deadline, Terminate 1/2/0x02.
TEST(RnrDisconnect, SenderFinEndsTheParkedWait)
{
    LoopbackPair p(with_rnr_wait(long_wait));
    std::vector<uint8_t> src(100);
    MemoryRegion* smr = p.a->reg(src.data(), src.size());
    ASSERT_EQ(p.a->post_send(WrOpcode::send, src.data(), 100, smr, 1), 0);
    const auto sent = p.a->wait(p.a->scq, 1, prompt);
    ASSERT_EQ(sent.size(), 1u);
    EXPECT_EQ(sent[0].status, WcStatus::success);  // TCP took it
    ASSERT_TRUE(wait_until([&] { return p.b->qp->counters().rx_rnr_waits.load() == 1; }, prompt));
    const auto t0 = std::chrono::steady_clock::now();
    p.a->qp->disconnect();
    // Graceful: FIN, SQD (already ERR if the Terminate came back that fast).
    EXPECT_TRUE(p.a->qp->state() == QpState::sqd || p.a->qp->state() == QpState::err);
    EXPECT_EQ(p.a->qp->counters().tx_fpdus.load(), 1u);
    expect_receiver_closed(*p.b, t0);
    EXPECT_EQ(p.b->qp->last_terminate_sent().code, no_buffer);
    EXPECT_TRUE(p.b->events.wait_async(AsyncEventType::qp_fatal));
    // The half-closed sender still reads: it gets the Terminate.
    ASSERT_TRUE(p.a->wait_state(QpState::err, prompt));
    EXPECT_LT(since(t0), prompt);
    EXPECT_EQ(p.a->qp->last_terminate_received().code, no_buffer);
    EXPECT_TRUE(p.a->events.wait_conn(QpConnectionEvent::terminated, prompt));
}

// The peer's FIN does not end the wait at once: an application posting its
// receives one at a time while the last Sends arrive still gets them all.
// The receiver parks on the second Send with the FIN already behind it;
// the receive posted right after that still lands, and the close stays
// graceful (a Terminate at once lost the message: CI's flake of
// FinBehindAClosedWindowStaysGracefulWhenThePeerReads).
TEST(RnrDisconnect, ReceivePostedSoonAfterThePeersFinStillLands)
{
    LoopbackPair p(with_rnr_wait(long_wait));
    std::vector<uint8_t> src(100), dst(200);
    fill_pattern(src, 3);
    MemoryRegion* smr = p.a->reg(src.data(), src.size());
    MemoryRegion* dmr = p.b->reg(dst.data(), dst.size());
    for (uint64_t i = 0; i < 2; ++i) ASSERT_EQ(p.a->post_send(WrOpcode::send, src.data(), 100, smr, i), 0);
    ASSERT_EQ(p.a->wait(p.a->scq, 2, prompt).size(), 2u);
    ASSERT_TRUE(wait_until([&] { return p.b->qp->counters().rx_rnr_waits.load() == 1; }, prompt));
    p.a->qp->disconnect();  // graceful: the FIN follows both Sends
    std::this_thread::sleep_for(50ms);  // the FIN is in the receiver's socket behind them
    ASSERT_EQ(p.b->post_recv(dst.data(), 100, dmr, 10), 0);
    ASSERT_TRUE(wait_until([&] { return p.b->qp->counters().rx_rnr_waits.load() == 2; }, prompt));
    ASSERT_EQ(p.b->post_recv(dst.data() + 100, 100, dmr, 11), 0);
    const auto wc = p.b->wait(p.b->rcq, 2, prompt);
    ASSERT_EQ(wc.size(), 2u);
    for (int i = 0; i < 2; ++i) {
        EXPECT_EQ(wc[i].wr_id, 10u + i);
        EXPECT_EQ(wc[i].status, WcStatus::success);
        EXPECT_EQ(std::memcmp(dst.data() + 100 * i, src.data(), 100), 0);
    }
    EXPECT_TRUE(p.b->events.wait_conn(QpConnectionEvent::peer_closed, prompt));
    EXPECT_FALSE(p.b->qp->last_terminate_sent().valid);
}

// Octets TCP has not sent yet (not taken by the peer's window).
int unsent_octets(int fd)
{
    int n = -1;
    return ::ioctl(fd, SIOCOUTQNSD, &n) == 0 ? n : -1;
}

// Sends of src from a to b, one at a time, each completed (TCP took it)
// before the next, until b has parked (no receive posted) and a's TCP holds
// octets it cannot send: a's graceful FIN would queue behind them.  Returns
// how many Sends that took, 0 if the state never came.
int send_until_the_fin_would_stall(LoopbackPair& p, std::vector<uint8_t>& src, MemoryRegion* smr)
{
    const int fd = p.a->qp->socket_fd();
    for (int i = 0; i < 200; ++i) {
        if (const int rc = p.a->post_send(WrOpcode::send, src.data(), static_cast<uint32_t>(src.size()), smr,
                                          static_cast<uint64_t>(i))) {
            ADD_FAILURE() << "post_send " << i << ": " << rc;
            return 0;
        }
        const auto wc = p.a->wait(p.a->scq, 1, prompt);
        if (wc.size() != 1 || wc[0].status != WcStatus::success) {
            ADD_FAILURE() << "send " << i << " stayed in transmission or failed";
            return 0;
        }
        // The first Send parks the receiver; before it has, more Sends could
        // only pile up unread (its engine thread may not have run yet).
        if (i == 0 && !wait_until([&] { return p.b->qp->counters().rx_rnr_waits.load() == 1; }, prompt)) {
            ADD_FAILURE() << "the receiver did not park";
            return 0;
        }
        if (unsent_octets(fd) > 0) {
            std::this_thread::sleep_for(50ms);
            if (unsent_octets(fd) > 0) return i + 1;
        }
    }
    ADD_FAILURE() << "TCP took and sent every Send: " << unsent_octets(fd) << " octets unsent";
    return 0;
}

constexpr uint32_t stall_msg = 16 * 1024;

// Nothing in transmission, but TCP still holds octets of completed Sends
// that the parked receiver's closed window keeps back: the FIN queues
// behind them and cannot reach the receiver (qperf rc_bw at its end, when
// the last WRs just fit into the socket buffers).  The close must still not
// wait for the receiver's rnr_wait_ms: a FIN the peer's window keeps back
// for a second becomes an abortive close (fin_stall.cpp), which the parked
// receiver hears at once.
TEST(RnrDisconnect, FinStuckBehindAClosedWindowDropsTheConnection)
{
    LoopbackPair p(with_rnr_wait(long_wait));
    std::vector<uint8_t> src(stall_msg);
    MemoryRegion* smr = p.a->reg(src.data(), src.size());
    ASSERT_GT(send_until_the_fin_would_stall(p, src, smr), 0);
    const auto t0 = std::chrono::steady_clock::now();
    p.a->qp->disconnect();
    EXPECT_EQ(p.a->qp->state(), QpState::sqd);  // graceful: nothing in transmission
    ASSERT_TRUE(p.a->wait_state(QpState::err, prompt));
    EXPECT_LT(since(t0), prompt);
    EXPECT_EQ(p.a->qp->counters().fin_stall_drops.load(), 1u);
    EXPECT_TRUE(p.a->events.wait_conn(QpConnectionEvent::peer_closed, prompt));  // our disconnect completed
    // The RST reaches the parked receiver: connection lost, no Terminate.
    expect_receiver_closed(*p.b, t0);
    EXPECT_TRUE(p.b->events.wait_conn(QpConnectionEvent::connection_error, prompt));
    EXPECT_FALSE(p.b->qp->last_terminate_sent().valid);
}

// The same stalled FIN, but the receiver's application posts its receives
// before the first look: the octets flow, the FIN follows them, and the
// close stays graceful -- every Send lands, nothing is dropped.
TEST(RnrDisconnect, FinBehindAClosedWindowStaysGracefulWhenThePeerReads)
{
    LoopbackPair p(with_rnr_wait(long_wait));
    std::vector<uint8_t> src(stall_msg);
    fill_pattern(src, 11);
    MemoryRegion* smr = p.a->reg(src.data(), src.size());
    const int sent = send_until_the_fin_would_stall(p, src, smr);
    ASSERT_GT(sent, 0);
    ASSERT_LE(sent, 256) << "more Sends than the receive queue holds";
    p.a->qp->disconnect();
    EXPECT_EQ(p.a->qp->state(), QpState::sqd);
    std::this_thread::sleep_for(300ms);  // well inside the first look (1 s)
    std::vector<uint8_t> dst(static_cast<size_t>(sent) * stall_msg);
    MemoryRegion* dmr = p.b->reg(dst.data(), dst.size());
    for (int i = 0; i < sent; ++i)
        ASSERT_EQ(p.b->post_recv(dst.data() + static_cast<size_t>(i) * stall_msg, stall_msg, dmr,
                                 static_cast<uint64_t>(i)),
                  0);
    const auto wc = p.b->wait(p.b->rcq, static_cast<size_t>(sent), prompt);
    ASSERT_EQ(wc.size(), static_cast<size_t>(sent));
    for (int i = 0; i < sent; ++i) {
        EXPECT_EQ(wc[i].wr_id, static_cast<uint64_t>(i));
        EXPECT_EQ(wc[i].status, WcStatus::success);
        EXPECT_EQ(wc[i].byte_len, stall_msg);
        EXPECT_EQ(std::memcmp(dst.data() + static_cast<size_t>(i) * stall_msg, src.data(), stall_msg), 0)
            << "message " << i;
    }
    // The FIN came through behind the octets: graceful both ways.
    EXPECT_TRUE(p.b->events.wait_conn(QpConnectionEvent::peer_closed, prompt));
    EXPECT_TRUE(p.a->events.wait_conn(QpConnectionEvent::peer_closed, prompt));
    EXPECT_EQ(p.a->qp->counters().fin_stall_drops.load(), 0u);
    EXPECT_FALSE(p.b->qp->last_terminate_sent().valid);
    EXPECT_FALSE(p.a->qp->last_terminate_received().valid);
}

// The parked receiver's own disconnect: its RQ is flushed, so the Send can
// never land; the connection is dropped and the sender hears it at once.
TEST(RnrDisconnect, ParkedReceiverDisconnectDropsAtOnce)
{
    ParkedStream s;
    const auto t0 = std::chrono::steady_clock::now();
    s.p.b->qp->disconnect();
    EXPECT_EQ(s.p.b->qp->state(), QpState::err);
    EXPECT_TRUE(s.p.b->events.wait_conn(QpConnectionEvent::peer_closed, prompt));
    ASSERT_TRUE(s.p.a->wait_state(QpState::err, prompt));
    EXPECT_LT(since(t0), prompt);
    // The RST: connection_error, or peer_closed when sendmsg took the error
    // first and the read saw the end of the stream.
    EXPECT_TRUE(wait_until([&] { return s.p.a->events.has_conn(QpConnectionEvent::connection_error) ||
                                        s.p.a->events.has_conn(QpConnectionEvent::peer_closed); },
                           prompt));
    EXPECT_FALSE(s.p.a->qp->connected());
    expect_flushed_in_order(*s.p.a, ParkedStream::count);
    expect_receiver_closed(*s.p.b, t0);
}

// No RNR wait involved: a disconnect with nothing in transmission stays
// graceful both ways, and receives posted meanwhile still land.
TEST(RnrDisconnect, IdleDisconnectStaysGraceful)
{
    LoopbackPair p(with_rnr_wait(long_wait));
    std::vector<uint8_t> src(4096), dst(4096);
    fill_pattern(src, 9);
    MemoryRegion* smr = p.a->reg(src.data(), src.size());
    MemoryRegion* dmr = p.b->reg(dst.data(), dst.size());
    ASSERT_EQ(p.b->post_recv(dst.data(), 4096, dmr, 3), 0);
    ASSERT_EQ(p.a->post_send(WrOpcode::send, src.data(), 4096, smr, 1), 0);
    ASSERT_EQ(p.a->wait(p.a->scq, 1, prompt).size(), 1u);
    p.a->qp->disconnect();
    // SQD, or already ERR: the peer answers a FIN with its own at once.
    EXPECT_TRUE(p.a->qp->state() == QpState::sqd || p.a->qp->state() == QpState::err);
    const auto r = p.b->wait(p.b->rcq, 1, prompt);
    ASSERT_EQ(r.size(), 1u);
    EXPECT_EQ(r[0].status, WcStatus::success);
    EXPECT_EQ(dst, src);
    EXPECT_TRUE(p.b->events.wait_conn(QpConnectionEvent::peer_closed, prompt));
    EXPECT_TRUE(p.a->events.wait_conn(QpConnectionEvent::peer_closed, prompt));
    EXPECT_FALSE(p.a->qp->last_terminate_received().valid);
    EXPECT_FALSE(p.b->qp->last_terminate_sent().valid);
}

}  // namespace
}  // namespace iwemu::test
