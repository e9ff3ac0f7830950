// MULPDU follows the EMSS (RFC 5044 §4.5): Linux reports a connection's MSS
// bounded by half the largest window the peer offered, so the value read at
// setup (32 KiB on loopback) grows once the window opens (64 KiB); a QP
// re-reads it before messages that need more than one FPDU.
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>

#include "emulator/wire/fpdu.h"
#include "tests/emulator/qp_loopback_fixture.h"

namespace iwemu::test {
namespace {

uint32_t mulpdu_of_current_emss(const QueuePair* qp)
{
    int mss = 0;
    socklen_t len = sizeof mss;
    if (getsockopt(qp->socket_fd(), IPPROTO_TCP, TCP_MAXSEG, &mss, &len) != 0 || mss <= 0) return 0;
    return wire::mpa_mulpdu(static_cast<uint32_t>(mss), false);
}

// Source and target of the Writes.  Declared before the LoopbackPair, so
// they outlive its engine threads (joined when the pair goes): the engine
// may still hold the target when the last completion is seen.
struct Megabyte {
    std::vector<uint8_t> src = std::vector<uint8_t>(1 << 20, 3), dst = std::vector<uint8_t>(1 << 20);
};

// RDMA Writes of 1 MiB from a to b, each waited for and a little apart (the
// QP reads TCP_MAXSEG at most once a millisecond).  The target's contents
// are the datapath tests' business (reading them here would race with the
// placement as far as ThreadSanitizer can tell).
void write_megabytes(LoopbackPair& p, Megabyte& m, int count)
{
    auto* smr = p.a->reg(m.src.data(), m.src.size());
    auto* dmr = p.b->reg(m.dst.data(), m.dst.size());
    const uint64_t received = p.b->qp->counters().rx_bytes.load();
    for (int i = 0; i < count; ++i) {
        ASSERT_EQ(p.a->post_send(WrOpcode::rdma_write, m.src.data(), static_cast<uint32_t>(m.src.size()), smr, i,
                                 reinterpret_cast<uint64_t>(m.dst.data()), dmr->rkey()),
                  0);
        auto c = p.a->wait(p.a->scq, 1);
        ASSERT_EQ(c.size(), 1u);
        ASSERT_EQ(c[0].status, WcStatus::success);
        std::this_thread::sleep_for(2ms);
    }
    ASSERT_TRUE(wait_until(
        [&] { return p.b->qp->counters().rx_bytes.load() >= received + uint64_t{m.src.size()} * count; }, 5s));
}

TEST(Mulpdu, FollowsTheEmssTcpReports)
{
    Megabyte m;
    LoopbackPair p;
    const uint32_t at_setup = p.a->qp->mulpdu();
    EXPECT_EQ(at_setup, mulpdu_of_current_emss(p.a->qp)) << "derived from TCP_MAXSEG at attach";
    write_megabytes(p, m, 8);
    const uint32_t now = mulpdu_of_current_emss(p.a->qp);
    ASSERT_GT(now, 0u);
    // One more message picks up the EMSS as it is now.
    write_megabytes(p, m, 1);
    EXPECT_EQ(p.a->qp->mulpdu(), now);
    // On Linux loopback the window opens within these 9 MiB: the MSS doubles.
    EXPECT_GT(now, at_setup) << "TCP_MAXSEG did not grow here; the check above still held";
    // FPDUs of the last message: no more than its size at the current MULPDU needs.
    const uint64_t fpdus_before = p.a->qp->counters().tx_fpdus.load();
    write_megabytes(p, m, 1);
    const uint64_t per_fpdu = now - wire::ddp_tagged_header_size;
    EXPECT_EQ(p.a->qp->counters().tx_fpdus.load() - fpdus_before, ((1u << 20) + per_fpdu - 1) / per_fpdu);
}

TEST(Mulpdu, AGivenMulpduStays)
{
    PairOptions o;
    o.mulpdu = 1442;
    Megabyte m;
    LoopbackPair p(o);
    write_megabytes(p, m, 4);
    EXPECT_EQ(p.a->qp->mulpdu(), 1442u);
}

}  // namespace
}  // namespace iwemu::test
