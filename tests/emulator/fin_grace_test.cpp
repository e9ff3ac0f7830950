// A graceful close's FIN waits Config::close_grace_ms after the peer's last
// message (emulator/qp/fin_grace.cpp): Linux siw fails a Send it has already
// sent when our FIN is processed before its TX thread finished with it.
#include "qp_loopback_fixture.h"

namespace iwemu::test {
namespace {

using Clock = std::chrono::steady_clock;

// How long after a's close b hears a's FIN, a having just received b's Send.
// `destroy`: a destroys its QP instead of disconnecting.
Clock::duration fin_delay(uint32_t grace_ms, bool destroy)
{
    PairOptions o;
    o.config.close_grace_ms = grace_ms;
    LoopbackPair p(o);
    std::vector<uint8_t> a_buf(64), b_buf(64, 9);
    MemoryRegion* ma = p.a->reg(a_buf.data(), a_buf.size());
    MemoryRegion* mb = p.b->reg(b_buf.data(), b_buf.size());
    EXPECT_EQ(p.a->post_recv(a_buf.data(), 64, ma, 1), 0);
    EXPECT_EQ(p.b->post_recv(b_buf.data(), 64, mb, 2), 0);
    EXPECT_EQ(p.a->post_send(WrOpcode::send, a_buf.data(), 8, ma, 3), 0);  // opens b's gate
    EXPECT_EQ(p.b->wait(p.b->rcq, 1).size(), 1u);
    EXPECT_EQ(p.b->post_send(WrOpcode::send, b_buf.data(), 64, mb, 4), 0);
    EXPECT_EQ(p.a->wait(p.a->rcq, 1).size(), 1u);  // b's last message is here
    const auto closed = Clock::now();
    if (destroy)
        EXPECT_EQ(p.a->emu->destroy_qp(p.a->qp), 0);
    else
        p.a->qp->disconnect();
    const auto deadline = closed + 5s;
    while (Clock::now() < deadline && !p.b->events.has_conn(QpConnectionEvent::peer_closed)) {
        Completion c[4];
        p.b->rcq->poll(c, 4);
        std::this_thread::sleep_for(1ms);
    }
    EXPECT_TRUE(p.b->events.has_conn(QpConnectionEvent::peer_closed));
    return Clock::now() - closed;
}

TEST(FinGrace, ADisconnectRightAfterThePeersMessageSendsItsFinAfterTheGrace)
{
    EXPECT_GE(fin_delay(300, false), 250ms);
}

TEST(FinGrace, ADestroyRightAfterThePeersMessageSendsItsFinAfterTheGrace)
{
    EXPECT_GE(fin_delay(300, true), 250ms);
}

TEST(FinGrace, WithoutAGraceTheFinGoesAtOnce)
{
    EXPECT_LT(fin_delay(0, false), 250ms);
    EXPECT_LT(fin_delay(0, true), 250ms);
}

}  // namespace
}  // namespace iwemu::test
