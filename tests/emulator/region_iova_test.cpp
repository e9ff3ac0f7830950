// Regions whose Tagged Offsets are not their virtual addresses (zero-based
// regions, ibv_reg_mr_iova): a local SGE names octets by the region's iova,
// like a remote Tagged Offset does, and the data path must translate it
// before touching memory (found while building tests/fuzz/fuzz_qp_receive).
#include "tests/emulator/qp_loopback_fixture.h"

namespace iwemu::test {
namespace {

constexpr uint32_t all_access = access_local_write | access_remote_write | access_remote_read;

MemoryRegion* reg_at(Side& s, std::vector<uint8_t>& buf, uint64_t iova, uint32_t access = all_access)
{
    MemoryRegion* mr = nullptr;
    EXPECT_EQ(s.emu->reg_mr(s.pd, buf.data(), buf.size(), iova, access, &mr), 0);
    return mr;
}

// Send from a zero-based source into a receive buffer registered at iova 0x10000.
TEST(RegionIova, SendBetweenRegionsNotAtTheirAddresses)
{
    std::vector<uint8_t> src(512), dst(512, 0xEE);
    fill_pattern(src, 3);
    LoopbackPair p;
    auto* smr = reg_at(*p.a, src, 0);
    auto* dmr = reg_at(*p.b, dst, 0x10000);
    Sge rsge{0x10000 + 32, 200, dmr->lkey()};
    RecvWr rwr{5, &rsge, 1};
    size_t bad;
    ASSERT_EQ(p.b->qp->post_recv(&rwr, 1, &bad), 0);
    ASSERT_EQ(p.a->post_send_at(WrOpcode::send, 64, 200, smr, 1), 0);
    auto r = p.b->wait(p.b->rcq, 1);
    ASSERT_EQ(r.size(), 1u);
    EXPECT_EQ(r[0].status, WcStatus::success);
    EXPECT_EQ(r[0].byte_len, 200u);
    EXPECT_EQ(0, std::memcmp(dst.data() + 32, src.data() + 64, 200));
    EXPECT_EQ(dst[31], 0xEE);
    EXPECT_EQ(dst[232], 0xEE);
    auto s = p.a->wait(p.a->scq, 1);
    ASSERT_EQ(s.size(), 1u);
    EXPECT_EQ(s[0].status, WcStatus::success);
}

// RDMA Read into a zero-based sink; the Read Request carries the sink's iova.
TEST(RegionIova, ReadIntoZeroBasedSink)
{
    std::vector<uint8_t> sink(1024, 0xEE), source(1024);
    fill_pattern(source, 4);
    LoopbackPair p;
    auto* kmr = reg_at(*p.a, sink, 0);
    auto* smr = p.b->reg(source.data(), source.size());
    ASSERT_EQ(p.a->post_send_at(WrOpcode::rdma_read, 100, 500, kmr, 1,
                                reinterpret_cast<uint64_t>(source.data()) + 10, smr->rkey()),
              0);
    auto s = p.a->wait(p.a->scq, 1);
    ASSERT_EQ(s.size(), 1u);
    EXPECT_EQ(s[0].status, WcStatus::success);
    EXPECT_EQ(0, std::memcmp(sink.data() + 100, source.data() + 10, 500));
    EXPECT_EQ(sink[99], 0xEE);
    EXPECT_EQ(sink[600], 0xEE);
}

// A local SGE outside the region's iova range is refused, not followed.
TEST(RegionIova, SgeOutsideTheIovaRangeFails)
{
    std::vector<uint8_t> src(256);
    LoopbackPair p;
    auto* smr = reg_at(*p.a, src, 0x10000);
    ASSERT_EQ(p.a->post_send_at(WrOpcode::send, reinterpret_cast<uint64_t>(src.data()), 16, smr, 1), 0);
    auto s = p.a->wait(p.a->scq, 1);
    ASSERT_EQ(s.size(), 1u);
    EXPECT_NE(s[0].status, WcStatus::success);
}

}  // namespace
}  // namespace iwemu::test
