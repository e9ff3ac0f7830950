// DDP header codec, RFC 5041 §4: control octet, both models, bounds.
#include <gtest/gtest.h>

#include <cstdint>

#include "emulator/wire/ddp_header.h"

namespace iwemu::wire {
namespace {

TEST(DdpControl, BitsOfEveryOctetRoundTrip)
{
    for (int o = 0; o < 256; ++o) {
        const DdpControl c = decode_ddp_control(static_cast<uint8_t>(o));
        EXPECT_EQ(c.tagged, (o & 0x80) != 0);
        EXPECT_EQ(c.last, (o & 0x40) != 0);
        EXPECT_EQ(c.rsvd, (o >> 2) & 0xF);
        EXPECT_EQ(c.dv, o & 0x3);
        EXPECT_EQ(encode_ddp_control(c), o);
    }
}

TEST(DdpControl, WireTableOctets)
{
    // WIRE.md §5: C1 (tagged, last), 81 (tagged), 41 (untagged, last), 01.
    EXPECT_EQ(encode_ddp_control({true, true, 0, 1}), 0xC1);
    EXPECT_EQ(encode_ddp_control({true, false, 0, 1}), 0x81);
    EXPECT_EQ(encode_ddp_control({false, true, 0, 1}), 0x41);
    EXPECT_EQ(encode_ddp_control({false, false, 0, 1}), 0x01);
}

TEST(DdpHeader, SizeFollowsTheTBit)
{
    EXPECT_EQ(ddp_header_size(0xC1), 14u);
    EXPECT_EQ(ddp_header_size(0x41), 18u);
}

TEST(DdpHeader, TaggedRoundTrip)
{
    DdpHeader h;
    h.control = {true, false, 0, 1};
    h.rsvdulp0 = 0x42;
    h.stag = 0xDEADBEEF;
    h.to = 0x0123456789ABCDEF;
    uint8_t buf[14];
    ASSERT_EQ(encode_ddp_header(h, buf), 14u);
    const uint8_t want[14] = {0x81, 0x42, 0xDE, 0xAD, 0xBE, 0xEF, 0x01, 0x23, 0x45, 0x67, 0x89, 0xAB, 0xCD, 0xEF};
    EXPECT_TRUE(std::equal(buf, buf + 14, want));
    const auto d = decode_ddp_header(buf);
    ASSERT_TRUE(d);
    EXPECT_EQ(*d, h);
}

TEST(DdpHeader, UntaggedRoundTrip)
{
    DdpHeader h;
    h.control = {false, true, 0, 1};
    h.rsvdulp0 = 0x44;
    h.rsvdulp1 = 0xCAFEF00D;
    h.qn = 0;
    h.msn = 0xFFFFFFFF;
    h.mo = 1482;
    uint8_t buf[18];
    ASSERT_EQ(encode_ddp_header(h, buf), 18u);
    const auto d = decode_ddp_header(buf);
    ASSERT_TRUE(d);
    EXPECT_EQ(*d, h);
    EXPECT_EQ(buf[14], 0);
    EXPECT_EQ(buf[17], 1482 & 0xFF);
}

TEST(DdpHeader, TooShortIsReported)
{
    uint8_t buf[18] = {0x41, 0x43};
    EXPECT_FALSE(decode_ddp_header({}));
    EXPECT_FALSE(decode_ddp_header(std::span(buf, 17)));  // untagged needs 18
    EXPECT_TRUE(decode_ddp_header(std::span(buf, 18)));
    buf[0] = 0xC1;
    EXPECT_FALSE(decode_ddp_header(std::span(buf, 13)));  // tagged needs 14
    EXPECT_TRUE(decode_ddp_header(std::span(buf, 14)));
}

TEST(DdpHeader, EncodeRefusesSmallBuffer)
{
    DdpHeader h;
    uint8_t buf[18] = {};
    EXPECT_EQ(encode_ddp_header(h, std::span(buf, 17)), 0u);
    h.control.tagged = true;
    EXPECT_EQ(encode_ddp_header(h, std::span(buf, 13)), 0u);
}

TEST(DdpHeader, VersionCheckPerModel)
{
    EXPECT_EQ(check_ddp_version({true, true, 0, 1}), std::nullopt);
    EXPECT_EQ(check_ddp_version({false, true, 0, 1}), std::nullopt);
    // RFC 5041 §7.2: 1/1/04 tagged, 1/2/06 untagged.
    for (uint8_t dv : {0, 2, 3}) {
        EXPECT_EQ(check_ddp_version({true, true, 0, dv}), (TerminateCode{TerminateLayer::ddp, 1, 0x04}));
        EXPECT_EQ(check_ddp_version({false, true, 0, dv}), (TerminateCode{TerminateLayer::ddp, 2, 0x06}));
    }
}

}  // namespace
}  // namespace iwemu::wire
