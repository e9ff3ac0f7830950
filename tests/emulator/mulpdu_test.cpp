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

// RDMA Writes of 1 MiB from a to b, each waited for and a little apart (the
// QP reads TCP_MAXSEG at most once a millisecond).
void write_megabytes(LoopbackPair& p, int count)
{
    std::vector<uint8_t> src(1 << 20), dst(1 << 20);
    fill_pattern(src, 3);
    auto* smr = p.a->reg(src.data(), src.size());
    auto* dmr = p.b->reg(dst.data(), dst.size());
    for (int i = 0; i < count; ++i) {
        ASSERT_EQ(p.a->post_send(WrOpcode::rdma_write, src.data(), static_cast<uint32_t>(src.size()), smr, i,
                                 reinterpret_cast<uint64_t>(dst.data()), dmr->rkey()),
                  0);
        auto c = p.a->wait(p.a->scq, 1);
        ASSERT_EQ(c.size(), 1u);
        ASSERT_EQ(c[0].status, WcStatus::success);
        std::this_thread::sleep_for(2ms);
    }
    // The last Write has been placed too (its completion only says it left).
    ASSERT_TRUE(wait_until([&] { return p.b->qp->counters().rx_bytes.load() >= uint64_t{src.size()} * count; },
                           5s));
    EXPECT_EQ(std::memcmp(src.data(), dst.data(), dst.size()), 0);
}

TEST(Mulpdu, FollowsTheEmssTcpReports)
{
    LoopbackPair p;
    const uint32_t at_setup = p.a->qp->mulpdu();
    EXPECT_EQ(at_setup, mulpdu_of_current_emss(p.a->qp)) << "derived from TCP_MAXSEG at attach";
    write_megabytes(p, 8);
    const uint32_t now = mulpdu_of_current_emss(p.a->qp);
    ASSERT_GT(now, 0u);
    // One more message picks up the EMSS as it is now.
    write_megabytes(p, 1);
    EXPECT_EQ(p.a->qp->mulpdu(), now);
    // On Linux loopback the window opens within these 9 MiB: the MSS doubles.
    EXPECT_GT(now, at_setup) << "TCP_MAXSEG did not grow here; the check above still held";
    // FPDUs of the last message: no more than its size at the current MULPDU needs.
    const uint64_t fpdus_before = p.a->qp->counters().tx_fpdus.load();
    write_megabytes(p, 1);
    const uint64_t per_fpdu = now - wire::ddp_tagged_header_size;
    EXPECT_EQ(p.a->qp->counters().tx_fpdus.load() - fpdus_before, ((1u << 20) + per_fpdu - 1) / per_fpdu);
}

TEST(Mulpdu, AGivenMulpduStays)
{
    PairOptions o;
    o.mulpdu = 1442;
    LoopbackPair p(o);
    write_megabytes(p, 4);
    EXPECT_EQ(p.a->qp->mulpdu(), 1442u);
}

}  // namespace
}  // namespace iwemu::test
