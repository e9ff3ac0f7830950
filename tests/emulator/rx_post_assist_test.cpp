// A thread that keeps posting runs the receive path the engine thread left
// idle (emulator/qp/rx_post_assist.cpp): the peer's RDMA Write into its memory
// is placed while it posts, even when the engine never reads the socket
// (Config::engine_receives false stands for an engine that gets no CPU).
#include <chrono>
#include <cstring>
#include <thread>
#include <vector>

#include "tests/emulator/qp_loopback_fixture.h"

namespace iwemu::test {
namespace {

PairOptions engine_does_not_receive()
{
    PairOptions o;
    o.config.engine_receives = false;
    return o;
}

// Empty polls read the socket themselves: the way b receives here.
bool poll_until_received(Side& side)
{
    Completion wc[4];
    const auto end = std::chrono::steady_clock::now() + 5s;
    while (side.qp->counters().rx_fpdus.load() == 0 && std::chrono::steady_clock::now() < end) side.scq->poll(wc, 4);
    return side.qp->counters().rx_fpdus.load() > 0;
}

// Like ib_send_bw -e's client: posts, and polls its send CQ only for
// completions it knows are there (an empty poll would receive by itself).
// Stops once a's QP has received something, or after `limit`.
void post_without_empty_polls(LoopbackPair& p, PairBuffers& buf, std::chrono::milliseconds limit)
{
    Completion wc[16];
    const auto end = std::chrono::steady_clock::now() + limit;
    uint64_t id = 0;
    while (p.a->qp->counters().rx_fpdus.load() == 0 && std::chrono::steady_clock::now() < end) {
        while (p.a->scq->size() > 0) p.a->scq->poll(wc, 16);
        ASSERT_EQ(p.a->post_send(WrOpcode::rdma_write, buf.a.data() + 2048, 64, buf.ma, ++id,
                                 reinterpret_cast<uint64_t>(buf.b.data()) + 2048, buf.mb->rkey()),
                  0);
        std::this_thread::sleep_for(20us);
    }
}

// b's RDMA Write of `value` into the first 4 octets of a's buffer (the
// credit perftest's server writes); b's TX opens once it has received a's
// first FPDU (a Write into b, received by b's empty polls).
void b_writes_into_a(LoopbackPair& p, PairBuffers& buf, uint32_t value)
{
    ASSERT_EQ(p.a->post_send(WrOpcode::rdma_write, buf.a.data() + 1024, 16, buf.ma, 0,
                             reinterpret_cast<uint64_t>(buf.b.data()) + 1024, buf.mb->rkey()),
              0);
    ASSERT_TRUE(poll_until_received(*p.b));
    std::memcpy(buf.b.data(), &value, sizeof value);
    ASSERT_EQ(p.b->post_send(WrOpcode::rdma_write, buf.b.data(), sizeof value, buf.mb, 0,
                             reinterpret_cast<uint64_t>(buf.a.data()), buf.ma->rkey()),
              0);
}

TEST(RxPostAssist, APostingThreadPlacesAWriteTheEngineLeftInTheSocket)
{
    LoopbackPair p(engine_does_not_receive());
    PairBuffers buf(p);
    b_writes_into_a(p, buf, 0x00000f54);
    // Nothing reads a's socket: no poll of a's CQs, no engine.
    std::this_thread::sleep_for(20ms);
    ASSERT_EQ(p.a->qp->counters().rx_fpdus.load(), 0u);

    post_without_empty_polls(p, buf, 3000ms);
    ASSERT_GE(p.a->qp->counters().rx_fpdus.load(), 1u) << "the Write waited in the socket while a posted";
    EXPECT_GE(p.a->qp->counters().rx_post_assists.load(), 1u);
    // This thread placed it.
    uint32_t placed = 0;
    std::memcpy(&placed, buf.a.data(), sizeof placed);
    EXPECT_EQ(placed, 0x00000f54u);
    // Join the engine threads before the buffers go.
    p.a.reset();
    p.b.reset();
}

// A QP that receives nothing: a posting loop looks every
// RxOwnership::assist_every_posts posts, but reads (finding nothing) once per
// assist_after_ns at most.
TEST(RxPostAssist, APosterWhosePeerIsSilentReadsOnceAMillisecondAtMost)
{
    LoopbackPair p;
    PairBuffers buf(p);
    Completion wc[16];
    const auto start = std::chrono::steady_clock::now();
    uint64_t posts = 0;
    while (std::chrono::steady_clock::now() - start < 30ms) {
        while (p.a->scq->size() > 0) p.a->scq->poll(wc, 16);
        if (p.a->post_send(WrOpcode::rdma_write, buf.a.data() + 2048, 64, buf.ma, ++posts,
                           reinterpret_cast<uint64_t>(buf.b.data()) + 2048, buf.mb->rkey()) != 0)
            std::this_thread::yield();  // the SQ is full until the batch leaves
    }
    const auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() - start);
    const uint64_t assists = p.a->qp->counters().rx_post_assists.load();
    ASSERT_GE(posts, 10u * RxOwnership::assist_every_posts) << "too few posts to look";
    EXPECT_GE(assists, 1u);
    EXPECT_LE(assists, static_cast<uint64_t>(ms.count()) + 1) << posts << " posts";
    EXPECT_EQ(p.a->qp->counters().rx_fpdus.load(), 0u);
    // b's engine places a's Writes: join it before the buffers go.
    p.a.reset();
    p.b.reset();
}

}  // namespace
}  // namespace iwemu::test
