// validate_rdmap_segment: one test per receive error (RFC 5040 §7.2,
// RFC 5041 §7.2, RFC 7306 §8), and the opcode table of WIRE.md §5.
#include <gtest/gtest.h>

#include "emulator/wire/rdmap_message.h"

namespace iwemu::wire {
namespace {

constexpr TerminateCode unexpected_opcode{TerminateLayer::rdmap, 2, 0x06};
constexpr TerminateCode invalid_qn{TerminateLayer::ddp, 2, 0x01};
constexpr TerminateCode unspecified{TerminateLayer::rdmap, 2, 0xFF};

DdpHeader untagged(uint8_t opcode, uint32_t qn)
{
    DdpHeader h;
    h.control = {false, true, 0, 1};
    h.rsvdulp0 = encode_rdmap_control(RdmapControl{1, 0, opcode});
    h.qn = qn;
    h.msn = 1;
    return h;
}

DdpHeader tagged(uint8_t opcode)
{
    DdpHeader h;
    h.control = {true, true, 0, 1};
    h.rsvdulp0 = encode_rdmap_control(RdmapControl{1, 0, opcode});
    h.stag = 0x100;
    return h;
}

TEST(RdmapValidation, WellFormedSegmentsPass)
{
    EXPECT_EQ(validate_rdmap_segment(tagged(0x0), 14), std::nullopt);
    EXPECT_EQ(validate_rdmap_segment(tagged(0x2), 1000), std::nullopt);
    EXPECT_EQ(validate_rdmap_segment(untagged(0x1, 1), 46), std::nullopt);
    for (uint8_t op : {0x3, 0x4, 0x5, 0x6})
        EXPECT_EQ(validate_rdmap_segment(untagged(op, 0), 18), std::nullopt) << int(op);
    EXPECT_EQ(validate_rdmap_segment(untagged(0x7, 2), 22), std::nullopt);
    EXPECT_EQ(validate_rdmap_segment(untagged(0x7, 2), 70), std::nullopt);
}

TEST(RdmapValidation, WrongDdpVersionTagged)
{
    DdpHeader h = tagged(0x0);
    h.control.dv = 2;
    EXPECT_EQ(validate_rdmap_segment(h, 30), (TerminateCode{TerminateLayer::ddp, 1, 0x04}));
}

TEST(RdmapValidation, WrongDdpVersionUntagged)
{
    DdpHeader h = untagged(0x3, 0);
    h.control.dv = 0;
    EXPECT_EQ(validate_rdmap_segment(h, 30), (TerminateCode{TerminateLayer::ddp, 2, 0x06}));
}

TEST(RdmapValidation, WrongRdmapVersion)
{
    for (uint8_t rv : {0, 2, 3}) {
        DdpHeader h = untagged(0x3, 0);
        h.rsvdulp0 = encode_rdmap_control(RdmapControl{rv, 0, 0x3});
        EXPECT_EQ(validate_rdmap_segment(h, 30), (TerminateCode{TerminateLayer::rdmap, 2, 0x05}));
    }
}

TEST(RdmapValidation, DdpVersionIsCheckedBeforeRdmapVersion)
{
    DdpHeader h = untagged(0x3, 0);
    h.control.dv = 3;
    h.rsvdulp0 = encode_rdmap_control(RdmapControl{0, 0, 0xE});
    EXPECT_EQ(validate_rdmap_segment(h, 30), (TerminateCode{TerminateLayer::ddp, 2, 0x06}));
}

TEST(RdmapValidation, UnassignedOpcodes)
{
    for (uint8_t op = 0xC; op <= 0xF; ++op) {
        EXPECT_EQ(validate_rdmap_segment(untagged(op, 0), 30, {.rfc7306 = true}), unexpected_opcode) << int(op);
        EXPECT_EQ(validate_rdmap_segment(tagged(op), 30, {.rfc7306 = true}), unexpected_opcode) << int(op);
    }
}

TEST(RdmapValidation, Rfc7306OpcodesWhenExtensionsOff)
{
    EXPECT_EQ(validate_rdmap_segment(untagged(0x8, 0), 26), unexpected_opcode);
    EXPECT_EQ(validate_rdmap_segment(untagged(0x9, 0), 26), unexpected_opcode);
    EXPECT_EQ(validate_rdmap_segment(untagged(0xA, 1), 70), unexpected_opcode);
    EXPECT_EQ(validate_rdmap_segment(untagged(0xB, 3), 30), unexpected_opcode);
    EXPECT_EQ(validate_rdmap_segment(untagged(0x8, 0), 26, {.rfc7306 = true}), std::nullopt);
    EXPECT_EQ(validate_rdmap_segment(untagged(0x9, 0), 26, {.rfc7306 = true}), std::nullopt);
    EXPECT_EQ(validate_rdmap_segment(untagged(0xA, 1), 70, {.rfc7306 = true}), std::nullopt);
    EXPECT_EQ(validate_rdmap_segment(untagged(0xB, 3), 30, {.rfc7306 = true}), std::nullopt);
}

TEST(RdmapValidation, UntaggedOpcodeOnTaggedModel)
{
    EXPECT_EQ(validate_rdmap_segment(tagged(0x3), 30), unexpected_opcode);  // Send with T=1
    EXPECT_EQ(validate_rdmap_segment(tagged(0x1), 30), unexpected_opcode);  // Read Request with T=1
    EXPECT_EQ(validate_rdmap_segment(tagged(0x7), 30), unexpected_opcode);  // Terminate with T=1
}

TEST(RdmapValidation, TaggedOpcodeOnUntaggedModel)
{
    EXPECT_EQ(validate_rdmap_segment(untagged(0x0, 0), 30), unexpected_opcode);  // Write with T=0
    EXPECT_EQ(validate_rdmap_segment(untagged(0x2, 0), 30), unexpected_opcode);  // Read Response with T=0
}

TEST(RdmapValidation, OpcodeOnWrongQueue)
{
    EXPECT_EQ(validate_rdmap_segment(untagged(0x3, 7), 30), invalid_qn);  // DDP-031: QN 7
    EXPECT_EQ(validate_rdmap_segment(untagged(0x3, 1), 30), invalid_qn);  // Send on the Read queue
    EXPECT_EQ(validate_rdmap_segment(untagged(0x1, 0), 46), invalid_qn);  // Read Request on QN 0
    EXPECT_EQ(validate_rdmap_segment(untagged(0x7, 0), 22), invalid_qn);  // Terminate on QN 0
    EXPECT_EQ(validate_rdmap_segment(untagged(0xB, 1), 30, {.rfc7306 = true}), invalid_qn);
}

TEST(RdmapValidation, FixedSizeMessagesWithWrongLength)
{
    EXPECT_EQ(validate_rdmap_segment(untagged(0x1, 1), 45), unspecified);
    EXPECT_EQ(validate_rdmap_segment(untagged(0x1, 1), 47), unspecified);  // Read Request with payload
    // EXT-002: Immediate Data is exactly 8 octets.
    EXPECT_EQ(validate_rdmap_segment(untagged(0x8, 0), 25, {.rfc7306 = true}), unspecified);
    EXPECT_EQ(validate_rdmap_segment(untagged(0x8, 0), 27, {.rfc7306 = true}), unspecified);
    EXPECT_EQ(validate_rdmap_segment(untagged(0xA, 1), 69, {.rfc7306 = true}), unspecified);
    EXPECT_EQ(validate_rdmap_segment(untagged(0xB, 3), 31, {.rfc7306 = true}), unspecified);
}

TEST(RdmapValidation, TerminateTooShort)
{
    EXPECT_EQ(validate_rdmap_segment(untagged(0x7, 2), 21), unspecified);
}

TEST(RdmapOpcodes, TableMatchesWire)
{
    // WIRE.md §5: the two octets with L=1.
    struct Row {
        uint8_t op;
        uint8_t ddp, rdmap;
    } rows[] = {{0x0, 0xC1, 0x40}, {0x1, 0x41, 0x41}, {0x2, 0xC1, 0x42}, {0x3, 0x41, 0x43},
                {0x4, 0x41, 0x44}, {0x5, 0x41, 0x45}, {0x6, 0x41, 0x46}, {0x7, 0x41, 0x47},
                {0x8, 0x41, 0x48}, {0x9, 0x41, 0x49}, {0xA, 0x41, 0x4A}, {0xB, 0x41, 0x4B}};
    for (const Row& r : rows) {
        const auto info = rdmap_opcode_info(r.op);
        ASSERT_TRUE(info);
        EXPECT_EQ(encode_ddp_control({info->tagged, true, 0, 1}), r.ddp) << int(r.op);
        EXPECT_EQ(encode_rdmap_control(static_cast<RdmapOpcode>(r.op)), r.rdmap);
        EXPECT_EQ(info->rfc7306, r.op >= 0x8);
    }
    EXPECT_FALSE(rdmap_opcode_info(0xC));
    EXPECT_EQ(rdmap_opcode_name(0xF), "Reserved for experiments");
    EXPECT_EQ(rdmap_opcode_name(0x6), "Send with Solicited Event and Invalidate");
}

TEST(RdmapControl, RoundTripAllOctets)
{
    for (int o = 0; o < 256; ++o)
        EXPECT_EQ(encode_rdmap_control(decode_rdmap_control(static_cast<uint8_t>(o))), o);
}

TEST(RdmapSegment, DecodeGivesBody)
{
    const uint8_t seg[20] = {0xC1, 0x40, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0, 8, 0xAA, 0xBB};
    const auto s = decode_rdmap_segment(std::span(seg, 16));
    ASSERT_TRUE(s);
    EXPECT_EQ(s->rdmap.opcode, 0);
    EXPECT_EQ(s->ddp.stag, 1u);
    EXPECT_EQ(s->ddp.to, 8u);
    ASSERT_EQ(s->body.size(), 2u);
    EXPECT_EQ(s->body[0], 0xAA);
    EXPECT_FALSE(decode_rdmap_segment(std::span(seg, 13)));
}

}  // namespace
}  // namespace iwemu::wire

namespace iwemu::wire {
namespace {

TEST(RdmapHeaderBuilders, ReproduceVectorHeaders)
{
    uint8_t buf[18];
    // V-F2: c1 40 12345678 0000000000001000
    ASSERT_EQ(encode_ddp_header(rdmap_tagged_header(RdmapOpcode::rdma_write, true, 0x12345678, 0x1000), buf), 14u);
    const uint8_t f2[14] = {0xc1, 0x40, 0x12, 0x34, 0x56, 0x78, 0, 0, 0, 0, 0, 0, 0x10, 0x00};
    EXPECT_TRUE(std::equal(f2, f2 + 14, buf));
    // V-F8: 41 44 cafef00d QN 0 MSN 2 MO 0
    ASSERT_EQ(encode_ddp_header(rdmap_untagged_header(RdmapOpcode::send_with_invalidate, true, 2, 0, 0xCAFEF00D), buf),
              18u);
    const uint8_t f8[18] = {0x41, 0x44, 0xca, 0xfe, 0xf0, 0x0d, 0, 0, 0, 0, 0, 0, 0, 2, 0, 0, 0, 0};
    EXPECT_TRUE(std::equal(f8, f8 + 18, buf));
    // Queue numbers come from the opcode; a stray Invalidate STag is dropped.
    EXPECT_EQ(rdmap_untagged_header(RdmapOpcode::rdma_read_request, true, 1, 0).qn, 1u);
    EXPECT_EQ(rdmap_untagged_header(RdmapOpcode::terminate, true, 1, 0).qn, 2u);
    EXPECT_EQ(rdmap_untagged_header(RdmapOpcode::atomic_response, true, 1, 0).qn, 3u);
    EXPECT_EQ(rdmap_untagged_header(RdmapOpcode::send, false, 1, 1482, 0xDEAD).rsvdulp1, 0u);
    // Everything built passes the receive checks.
    EXPECT_EQ(validate_rdmap_segment(rdmap_untagged_header(RdmapOpcode::send_with_se, true, 3, 0), 20), std::nullopt);
    EXPECT_EQ(validate_rdmap_segment(rdmap_tagged_header(RdmapOpcode::rdma_read_response, false, 1, 2), 100),
              std::nullopt);
}

}  // namespace
}  // namespace iwemu::wire
