// The receive look-ahead setting (key rx_lookahead, IWEMU_RX_LOOKAHEAD):
// auto or bounded by the staging buffer; auto is the whole staging buffer for
// a peer on this host; and with a large look-ahead every octet still lands
// where it belongs, the payload it catches copied out of staging.
#include <gtest/gtest.h>

#include <cstring>
#include <string>
#include <vector>

#include "tests/emulator/qp_loopback_fixture.h"

namespace iwemu::test {
namespace {

using namespace std::chrono_literals;

TEST(RxLookahead, SettingIsBoundedByTheStagingBuffer)
{
    Config c;
    std::string err;
    EXPECT_EQ(c.rx_lookahead, 0u);  // auto
    EXPECT_TRUE(c.set("rx_lookahead", "65536", &err)) << err;
    EXPECT_EQ(c.rx_lookahead, 65536u);
    EXPECT_TRUE(c.set("rx_lookahead", "512", &err)) << err;
    EXPECT_EQ(c.rx_lookahead, 512u);
    EXPECT_TRUE(c.set("rx_lookahead", "auto", &err)) << err;
    EXPECT_EQ(c.rx_lookahead, 0u);
    for (const char* bad : {"511", "65537", "0", "-1", "64k", "", "Auto"}) {
        Config d;
        d.rx_lookahead = 4096;
        EXPECT_FALSE(d.set("rx_lookahead", bad, &err)) << bad;
        EXPECT_EQ(d.rx_lookahead, 4096u) << bad;
        EXPECT_NE(err.find("rx_lookahead"), std::string::npos) << err;
    }
}

TEST(RxLookahead, AutoTakesTheWholeStagingBufferForAPeerOnThisHost)
{
    {
        LoopbackPair p;  // 127.0.0.1 on both ends
        EXPECT_EQ(p.a->qp->rx_lookahead(), 65536u);
        EXPECT_EQ(p.b->qp->rx_lookahead(), 65536u);
    }
    PairOptions o;
    std::string err;
    ASSERT_TRUE(o.config.set("rx_lookahead", "2048", &err)) << err;
    LoopbackPair p(o);
    EXPECT_EQ(p.b->qp->rx_lookahead(), 2048u);
}

// 64 KiB Writes and a multi-FPDU Send of an odd length, with the largest
// look-ahead: everything arrives intact, and (unlike the default, see
// Datapath.LargeWritesAreNotCopiedThroughStaging) payload went through staging.
TEST(RxLookahead, LargeLookaheadPlacesEveryOctetAndCopiesWhatItCatches)
{
    constexpr uint32_t n = 64 * 1024;
    constexpr int writes = 64;
    constexpr uint32_t send_len = 1024 * 1024 + 3;  // 17 FPDUs, PAD on the last
    PairOptions o;
    std::string err;
    ASSERT_TRUE(o.config.set("rx_lookahead", "65536", &err)) << err;
    LoopbackPair p(o);
    std::vector<uint8_t> src(send_len), dst(n, 0), rbuf(send_len + 5, 0xEE);
    fill_pattern(src, 11);
    auto* smr = p.a->reg(src.data(), src.size());
    auto* dmr = p.b->reg(dst.data(), dst.size());
    auto* rmr = p.b->reg(rbuf.data(), rbuf.size());
    ASSERT_EQ(p.b->post_recv(rbuf.data(), static_cast<uint32_t>(rbuf.size()), rmr, 1), 0);
    for (int i = 0; i < writes; ++i)
        ASSERT_EQ(p.a->post_send(WrOpcode::rdma_write, src.data() + i, n, smr, 2, reinterpret_cast<uint64_t>(dst.data()),
                                 dmr->rkey()),
                  0);
    ASSERT_EQ(p.a->post_send(WrOpcode::send, src.data(), send_len, smr, 3), 0);
    const auto wc = p.b->wait(p.b->rcq, 1, 30s);
    ASSERT_EQ(wc.size(), 1u);
    EXPECT_EQ(wc[0].status, WcStatus::success);
    EXPECT_EQ(wc[0].byte_len, send_len);
    // The last Write (offset writes - 1 into src) is what dst holds now.
    EXPECT_EQ(0, std::memcmp(src.data() + writes - 1, dst.data(), n));
    EXPECT_EQ(0, std::memcmp(src.data(), rbuf.data(), send_len));
    // Past the message the receive buffer is untouched.
    for (size_t i = send_len; i < rbuf.size(); ++i) EXPECT_EQ(rbuf[i], 0xEE) << i;
    // More than the default ever copies (Datapath.LargeWritesAreNotCopiedThroughStaging).
    const uint64_t copied = p.b->qp->counters().rx_copied_bytes.load();
    EXPECT_GT(copied, uint64_t{n} * writes / 16) << "copied " << copied;
}

}  // namespace
}  // namespace iwemu::test
