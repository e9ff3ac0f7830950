// Known-answer tests: every FPDU vector of VECTORS.md §4 (V-F*) and §5 (V-X*)
// decodes to the table values and re-encodes to the same octets.
#include <gtest/gtest.h>
#include <isa-l/crc.h>

#include <cstdint>
#include <string_view>
#include <vector>

#include "emulator/wire/ddp_header.h"
#include "emulator/wire/rdmap_ext.h"
#include "emulator/wire/rdmap_message.h"
#include "emulator/wire/read_request.h"
#include "emulator/wire/terminate_message.h"

namespace iwemu::wire {
namespace {

std::vector<uint8_t> hex(std::string_view s)
{
    std::vector<uint8_t> out;
    int hi = -1;
    for (char ch : s) {
        int v = (ch >= '0' && ch <= '9') ? ch - '0' : (ch >= 'a' && ch <= 'f') ? ch - 'a' + 10 : -1;
        if (v < 0)
            continue;
        if (hi < 0) {
            hi = v;
        } else {
            out.push_back(static_cast<uint8_t>(hi << 4 | v));
            hi = -1;
        }
    }
    return out;
}

// RFC 5044 §4.4 CRC via ISA-L, stored least significant octet first (VECTORS §1).
void append_crc(std::vector<uint8_t>& fpdu)
{
    const uint32_t v = ~crc32_iscsi(fpdu.data(), static_cast<int>(fpdu.size()), 0xFFFFFFFF);
    for (int i = 0; i < 4; ++i)
        fpdu.push_back(static_cast<uint8_t>(v >> (8 * i)));
}

// ULPDU_Length ‖ ULPDU ‖ PAD ‖ CRC (WIRE.md §6.1).
std::vector<uint8_t> frame(std::span<const uint8_t> ulpdu)
{
    std::vector<uint8_t> f(2 + ulpdu.size());
    f[0] = static_cast<uint8_t>(ulpdu.size() >> 8);
    f[1] = static_cast<uint8_t>(ulpdu.size());
    std::copy(ulpdu.begin(), ulpdu.end(), f.begin() + 2);
    while (f.size() % 4)
        f.push_back(0);
    append_crc(f);
    return f;
}

std::span<const uint8_t> ulpdu_of(const std::vector<uint8_t>& fpdu)
{
    const size_t len = size_t{fpdu[0]} << 8 | fpdu[1];
    return std::span<const uint8_t>(fpdu).subspan(2, len);
}

struct Vector {
    const char* id;
    const char* hex;
    bool tagged;
    uint8_t opcode;
    uint32_t stag_or_inval;  // STag (tagged) or RsvdULP[8:39] (untagged)
    uint64_t to;
    uint32_t qn, msn;
    size_t payload;  // octets after DDP + RDMAP headers
};

const Vector vectors[] = {
    {"V-F1",
     "00 1d 41 43 00 00 00 00 00 00 00 00 00 00 00 01 00 00 00 00 68 65 6c 6c 6f 20 69 57 41 52 50 00 05 d0 2e 4c",
     false, 0x3, 0, 0, 0, 1, 11},
    {"V-F2",
     "00 1e c1 40 12 34 56 78 00 00 00 00 00 00 10 00 00 01 02 03 04 05 06 07 08 09 0a 0b 0c 0d 0e 0f 81 cd 8e ad",
     true, 0x0, 0x12345678, 0x1000, 0, 0, 16},
    {"V-F3",
     "00 2e 41 41 00 00 00 00 00 00 00 01 00 00 00 01 00 00 00 00 aa bb cc dd 00 00 00 00 00 00 20 00"
     "00 00 10 00 11 22 33 44 00 00 00 00 00 00 80 00 e5 d4 77 06",
     false, 0x1, 0, 0, 1, 1, 0},
    {"V-F4", "00 16 c1 42 aa bb cc dd 00 00 00 00 00 00 20 00 a5 a5 a5 a5 a5 a5 a5 a5 99 ed 49 56", true, 0x2,
     0xAABBCCDD, 0x2000, 0, 0, 8},
    {"V-F5", "00 12 41 43 00 00 00 00 00 00 00 00 00 00 00 01 00 00 00 00 58 7b e8 c4", false, 0x3, 0, 0, 0, 1, 0},
    {"V-F6", "00 0e c1 40 00 00 00 00 00 00 00 00 00 00 00 00 a3 05 72 ab", true, 0x0, 0, 0, 0, 0, 0},
    {"V-F7",
     "00 46 41 47 00 00 00 00 00 00 00 02 00 00 00 01 00 00 00 00 01 00 e0 00 00 2e 41 41 00 00 00 00"
     "00 00 00 01 00 00 00 01 00 00 00 00 aa bb cc dd 00 00 00 00 00 00 20 00 00 00 10 00 11 22 33 44"
     "00 00 00 00 00 00 80 00 1c c5 fa 1f",
     false, 0x7, 0, 0, 2, 1, 0},
    {"V-F8", "00 15 41 44 ca fe f0 0d 00 00 00 00 00 00 00 02 00 00 00 00 78 79 7a 00 a4 e7 56 c1", false, 0x4,
     0xCAFEF00D, 0, 0, 2, 3},
    {"V-F9", "00 16 41 47 00 00 00 00 00 00 00 02 00 00 00 01 00 00 00 00 20 02 00 00 7f e4 25 85", false, 0x7, 0,
     0, 2, 1, 0},
    {"V-F10",
     "00 2e 41 41 00 00 00 00 00 00 00 01 00 00 00 01 00 00 00 00 00 00 00 00 00 00 00 00 00 00 00 00"
     "00 00 00 00 00 00 00 00 00 00 00 00 00 00 00 00 f2 c6 dd 3d",
     false, 0x1, 0, 0, 1, 1, 0},
    {"V-F11", "00 14 41 45 00 00 00 00 00 00 00 00 00 00 00 03 00 00 00 00 73 65 00 00 39 2d 92 8a", false, 0x5, 0,
     0, 0, 3, 2},
    {"V-F12",
     "00 17 41 46 01 02 03 04 00 00 00 00 00 00 00 04 00 00 00 00 73 65 69 6e 76 00 00 00 65 3b b8 1a", false,
     0x6, 0x01020304, 0, 0, 4, 5},
    {"V-F13",
     "00 26 41 47 00 00 00 00 00 00 00 02 00 00 00 01 00 00 00 00 11 01 c0 00 00 1e c1 40 12 34 56 78"
     "00 00 00 00 00 00 10 00 ac c5 e8 50",
     false, 0x7, 0, 0, 2, 1, 0},
    {"V-F14", "00 0e c1 42 00 00 00 00 00 00 00 00 00 00 00 00 69 75 d6 ca", true, 0x2, 0, 0, 0, 0, 0},
    {"V-X1",
     "00 1a 41 48 00 00 00 00 00 00 00 00 00 00 00 03 00 00 00 00 01 02 03 04 05 06 07 08 cc b2 8c 64", false,
     0x8, 0, 0, 0, 3, 0},
    {"V-X2",
     "00 46 41 4a 00 00 00 00 00 00 00 01 00 00 00 02 00 00 00 00 00 00 00 00 00 00 00 77 12 34 56 78"
     "00 00 00 00 00 00 00 40 00 00 00 00 00 00 00 01 00 00 00 00 00 00 00 00 00 00 00 00 00 00 00 00"
     "ff ff ff ff ff ff ff ff 81 e6 a6 1e",
     false, 0xA, 0, 0, 1, 2, 0},
    {"V-X3",
     "00 1e 41 4b 00 00 00 00 00 00 00 03 00 00 00 01 00 00 00 00 00 00 00 77 00 00 00 00 00 00 00 29"
     "55 66 71 a6",
     false, 0xB, 0, 0, 3, 1, 0},
};

class FpduVector : public ::testing::TestWithParam<Vector> {};

TEST_P(FpduVector, DecodesToTableValues)
{
    const Vector& v = GetParam();
    const std::vector<uint8_t> fpdu = hex(v.hex);
    const auto ulpdu = ulpdu_of(fpdu);

    const auto seg = decode_rdmap_segment(ulpdu);
    ASSERT_TRUE(seg);
    EXPECT_EQ(seg->ddp.control.tagged, v.tagged);
    EXPECT_TRUE(seg->ddp.control.last);
    EXPECT_EQ(seg->ddp.control.dv, 1);
    EXPECT_EQ(seg->ddp.control.rsvd, 0);
    EXPECT_EQ(seg->rdmap.rv, 1);
    EXPECT_EQ(seg->rdmap.opcode, v.opcode);
    if (v.tagged) {
        EXPECT_EQ(seg->ddp.stag, v.stag_or_inval);
        EXPECT_EQ(seg->ddp.to, v.to);
    } else {
        EXPECT_EQ(seg->ddp.rsvdulp1, v.stag_or_inval);
        EXPECT_EQ(seg->ddp.qn, v.qn);
        EXPECT_EQ(seg->ddp.msn, v.msn);
        EXPECT_EQ(seg->ddp.mo, 0u);
    }
    const auto info = rdmap_opcode_info(v.opcode);
    ASSERT_TRUE(info);
    if (v.opcode != 0x7) {
        EXPECT_EQ(seg->body.size(), info->rdmap_header + v.payload);
    }
    EXPECT_EQ(validate_rdmap_segment(seg->ddp, ulpdu.size(), {.rfc7306 = true}), std::nullopt);
    if (info->rfc7306) {
        EXPECT_EQ(validate_rdmap_segment(seg->ddp, ulpdu.size(), {.rfc7306 = false}),
                  (TerminateCode{TerminateLayer::rdmap, 2, 0x06}));
    }
}

// Decode, then rebuild the ULPDU from the decoded structures and frame it:
// the result must be the vector, CRC included.
TEST_P(FpduVector, ReencodesToSameOctets)
{
    const Vector& v = GetParam();
    const std::vector<uint8_t> fpdu = hex(v.hex);
    const auto ulpdu = ulpdu_of(fpdu);
    const auto seg = decode_rdmap_segment(ulpdu);
    ASSERT_TRUE(seg);

    std::vector<uint8_t> out(ulpdu.size());
    size_t off = encode_ddp_header(seg->ddp, out);
    ASSERT_EQ(off, v.tagged ? 14u : 18u);
    const std::span<uint8_t> rest = std::span(out).subspan(off);
    size_t body = 0;
    switch (static_cast<RdmapOpcode>(v.opcode)) {
    case RdmapOpcode::rdma_read_request:
        body = encode_read_request(*decode_read_request(seg->body), rest);
        break;
    case RdmapOpcode::immediate_data:
    case RdmapOpcode::immediate_data_with_se:
        body = encode_immediate_data(*decode_immediate_data(seg->body), rest);
        break;
    case RdmapOpcode::atomic_request:
        body = encode_atomic_request(*decode_atomic_request(seg->body), rest);
        break;
    case RdmapOpcode::atomic_response:
        body = encode_atomic_response(*decode_atomic_response(seg->body), rest);
        break;
    case RdmapOpcode::terminate: {
        // The builder is tested on its own; here re-encode control word +
        // the headers it announces.
        const TerminateMessage t = decode_terminate(seg->body);
        ASSERT_EQ(t.status, TerminateDecodeStatus::ok);
        ASSERT_EQ(t.size, seg->body.size());
        encode_terminate_control(t.control, rest.first<4>());
        body = 4;
        if (t.control.d) {
            rest[4] = static_cast<uint8_t>(t.ddp_segment_length >> 8);
            rest[5] = static_cast<uint8_t>(t.ddp_segment_length);
            body = 6 + encode_ddp_header(*t.terminated_ddp_header, rest.subspan(6));
        }
        if (t.control.r)
            body += encode_read_request(*t.terminated_rdma_header, rest.subspan(body));
        break;
    }
    default:
        break;
    }
    ASSERT_GE(seg->body.size(), body);
    // Payload octets after the RDMAP header are carried unchanged.
    const auto skip = static_cast<ptrdiff_t>(body);
    std::copy(seg->body.begin() + skip, seg->body.end(), rest.begin() + skip);
    EXPECT_EQ(std::vector<uint8_t>(ulpdu.begin(), ulpdu.end()), out);
    EXPECT_EQ(frame(out), fpdu) << v.id << ": CRC or PAD differs";
}

INSTANTIATE_TEST_SUITE_P(Vectors, FpduVector, ::testing::ValuesIn(vectors),
                         [](const auto& info) {
                             std::string n = info.param.id;
                             std::erase(n, '-');
                             return n;
                         });

TEST(RdmapVectorBodies, ReadRequestV_F3)
{
    const auto fpdu = hex(vectors[2].hex);
    const auto seg = decode_rdmap_segment(ulpdu_of(fpdu));
    const auto rr = decode_read_request(seg->body);
    ASSERT_TRUE(rr);
    EXPECT_EQ(*rr, (RdmaReadRequestHeader{0xAABBCCDD, 0x2000, 4096, 0x11223344, 0x8000}));
}

TEST(RdmapVectorBodies, ImmediateDataV_X1)
{
    const auto fpdu = hex(vectors[14].hex);
    const auto seg = decode_rdmap_segment(ulpdu_of(fpdu));
    const auto imm = decode_immediate_data(seg->body);
    ASSERT_TRUE(imm);
    EXPECT_EQ(imm->data, (std::array<uint8_t, 8>{1, 2, 3, 4, 5, 6, 7, 8}));
}

TEST(RdmapVectorBodies, AtomicRequestV_X2)
{
    const auto fpdu = hex(vectors[15].hex);
    const auto seg = decode_rdmap_segment(ulpdu_of(fpdu));
    const auto a = decode_atomic_request(seg->body);
    ASSERT_TRUE(a);
    EXPECT_EQ(a->aopcode, static_cast<uint8_t>(AtomicOpcode::fetch_add));
    EXPECT_EQ(a->reserved, 0u);
    EXPECT_EQ(a->request_identifier, 0x77u);
    EXPECT_EQ(a->remote_stag, 0x12345678u);
    EXPECT_EQ(a->remote_to, 0x40u);
    EXPECT_EQ(a->add_or_swap_data, 1u);
    EXPECT_EQ(a->add_or_swap_mask, 0u);
    EXPECT_EQ(a->compare_data, 0u);
    EXPECT_EQ(a->compare_mask, ~uint64_t{0});
}

TEST(RdmapVectorBodies, AtomicResponseV_X3)
{
    const auto fpdu = hex(vectors[16].hex);
    const auto seg = decode_rdmap_segment(ulpdu_of(fpdu));
    const auto a = decode_atomic_response(seg->body);
    ASSERT_TRUE(a);
    EXPECT_EQ(a->original_request_identifier, 0x77u);
    EXPECT_EQ(a->original_remote_data_value, 41u);
}

TEST(RdmapVectorBodies, ShortBodiesAreRejected)
{
    const uint8_t z[52] = {};
    EXPECT_FALSE(decode_read_request(std::span(z, 27)));
    EXPECT_FALSE(decode_immediate_data(std::span(z, 7)));
    EXPECT_FALSE(decode_atomic_request(std::span(z, 51)));
    EXPECT_FALSE(decode_atomic_response(std::span(z, 11)));
    uint8_t out[51];
    EXPECT_EQ(encode_read_request({}, std::span(out, 27)), 0u);
    EXPECT_EQ(encode_atomic_request({}, std::span(out, 51)), 0u);
}

// The V-F7 / V-F9 / V-F13 Terminates, produced by the builder from the
// offending segment, framed, equal the vectors octet for octet.
TEST(TerminateBuilder, V_F7_ReadRequestInvalidSourceStag)
{
    const auto f3 = hex(vectors[2].hex);
    const auto offending = ulpdu_of(f3);
    uint8_t out[terminate_ulpdu_max_size];
    const size_t n = build_terminate_ulpdu(
        {TerminateCode{TerminateLayer::rdmap, etype::rdmap_remote_protection, ecode::rdmap_invalid_stag}, offending,
         static_cast<uint16_t>(offending.size())},
        1, out);
    ASSERT_EQ(n, 70u);
    EXPECT_EQ(frame(std::span(out, n)), hex(vectors[6].hex));
}

TEST(TerminateBuilder, V_F9_CrcErrorCarriesNoHeaders)
{
    // Even with the offending segment at hand, an LLP error echoes nothing.
    const auto f1 = hex(vectors[0].hex);
    uint8_t out[terminate_ulpdu_max_size];
    const size_t n = build_terminate_ulpdu(
        {TerminateCode{TerminateLayer::llp, etype::llp_mpa, ecode::mpa_crc_error}, ulpdu_of(f1), 29}, 1, out);
    ASSERT_EQ(n, 22u);
    EXPECT_EQ(frame(std::span(out, n)), hex(vectors[8].hex));
}

TEST(TerminateBuilder, V_F13_TaggedBaseOrBounds)
{
    const auto f2 = hex(vectors[1].hex);
    const auto offending = ulpdu_of(f2);
    uint8_t out[terminate_ulpdu_max_size];
    const size_t n = build_terminate_ulpdu(
        {TerminateCode{TerminateLayer::ddp, etype::ddp_tagged_buffer, ecode::ddp_tagged_base_or_bounds_violation},
         offending, static_cast<uint16_t>(offending.size())},
        1, out);
    ASSERT_EQ(n, 38u);
    EXPECT_EQ(frame(std::span(out, n)), hex(vectors[12].hex));
}

}  // namespace
}  // namespace iwemu::wire

namespace iwemu::wire {
namespace {

TEST(ReadRequest, AdvancedForAPartlyServedRead)
{
    const RdmaReadRequestHeader h{0xAABBCCDD, 0x2000, 4096, 0x11223344, 0x8000};
    EXPECT_EQ(advance_read_request(h, 0), h);
    EXPECT_EQ(advance_read_request(h, 1500), (RdmaReadRequestHeader{0xAABBCCDD, 0x25DC, 2596, 0x11223344, 0x85DC}));
    // Never past the end of the request.
    EXPECT_EQ(advance_read_request(h, 9999).rdma_read_message_size, 0u);
    EXPECT_EQ(advance_read_request(h, 9999).data_source_to, 0x9000u);
}

}  // namespace
}  // namespace iwemu::wire
