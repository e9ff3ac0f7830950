// FPDU encoder: VECTORS.md §4-§6 byte for byte, PAD, sizes, MULPDU
// (WIRE.md §6.4), the zero-copy iovec layout and encoder limits.
#include "emulator/wire/fpdu.h"

#include <gtest/gtest.h>

#include <random>
#include <vector>

#include "tests/unit/wire/fpdu_vectors.h"

namespace iwemu::wire {
namespace {

using test::fpdu_vectors;

std::vector<uint8_t> flatten(std::span<const iovec> iov)
{
    std::vector<uint8_t> out;
    for (const auto& v : iov) {
        auto* p = static_cast<const uint8_t*>(v.iov_base);
        out.insert(out.end(), p, p + v.iov_len);
    }
    return out;
}

TEST(Fpdu, PadRule)
{
    // MPA-004: lengths 0..7 give pads 2,1,0,3,2,1,0,3.
    const size_t expect[] = {2, 1, 0, 3, 2, 1, 0, 3};
    for (size_t l = 0; l < 8; ++l) EXPECT_EQ(mpa_pad_length(l), expect[l]) << l;
    for (size_t l = 0; l < 70000; ++l) ASSERT_EQ((2 + l + mpa_pad_length(l)) % 4, 0u);
}

TEST(Fpdu, MulpduExamples)
{
    // WIRE.md §6.4 / MPA-007 / MPA-008.
    struct { uint32_t emss, plain, marked; } cases[] = {
        {536, 530, 522}, {1448, 1442, 1430}, {1460, 1454, 1442}, {8948, 8942, 8870},
        {65483, 64768, 64768}, {100, 128, 128}, {0, 128, 128}, {0xFFFFFFFF, 64768, 64768},
    };
    for (const auto& c : cases) {
        EXPECT_EQ(mpa_mulpdu(c.emss, false), c.plain) << c.emss;
        EXPECT_EQ(mpa_mulpdu(c.emss, true), c.marked) << c.emss;
    }
}

TEST(Fpdu, WireLength)
{
    EXPECT_EQ(mpa_fpdu_wire_length(14, false), 20u);  // tagged header only
    EXPECT_EQ(mpa_fpdu_wire_length(18, false), 24u);  // untagged header only
    EXPECT_EQ(mpa_fpdu_wire_length(29, true, 500), 40u);   // V-M3
    EXPECT_EQ(mpa_fpdu_wire_length(29, true, 992), 40u);   // V-M4 (case C)
    EXPECT_EQ(mpa_fpdu_wire_length(29, true, 1536), 40u);  // V-M5 (case A)
    EXPECT_EQ(mpa_fpdu_wire_length(29, true, 4), 36u);
    EXPECT_EQ(mpa_markers_in_fpdu(42, 0), 1u);  // V-M1
    EXPECT_EQ(mpa_markers_in_fpdu(0xFFFF, 0), 130u);  // opening + 129 (66060 / 512)
}

TEST(Fpdu, VectorsEncodeByteForByte)
{
    for (const auto& v : fpdu_vectors()) {
        SCOPED_TRACE(v.id);
        const size_t h = test::ddp_header_len(v.ulpdu);
        const auto header = std::span(v.ulpdu).first(h);
        const auto payload = std::span(v.ulpdu).subspan(h);
        std::vector<uint8_t> out(v.wire.size() + 16, 0xEE);
        const FpduFraming framing{true, v.markers};
        ASSERT_EQ(encode_fpdu(out, header, payload, v.stream_offset, framing), v.wire.size());
        out.resize(v.wire.size());
        EXPECT_EQ(out, v.wire);
        EXPECT_EQ(mpa_fpdu_wire_length(v.ulpdu.size(), v.markers, v.stream_offset), v.wire.size());

        // Whole ULPDU passed as header gives the same bytes.
        std::vector<uint8_t> out2(v.wire.size());
        ASSERT_EQ(encode_fpdu(out2, v.ulpdu, {}, v.stream_offset, framing), v.wire.size());
        EXPECT_EQ(out2, v.wire);

        FpduGather g;
        std::vector<iovec> iov(FpduGather::max_iov(1));
        const std::span<const uint8_t> slices[] = {payload};
        ASSERT_EQ(g.build(header, slices, v.stream_offset, framing, iov), FpduGather::Status::ok);
        EXPECT_EQ(g.crc(), v.crc);
        EXPECT_EQ(g.wire_length(), v.wire.size());
        EXPECT_EQ(g.next_stream_offset(), v.stream_offset + v.wire.size());
        EXPECT_EQ(flatten(std::span(iov).first(g.iov_count())), v.wire);
    }
}

TEST(Fpdu, CrcOffSendsZeroCrcField)
{
    const auto v = fpdu_vectors()[0];  // V-F1
    std::vector<uint8_t> out(v.wire.size());
    ASSERT_EQ(encode_fpdu(out, std::span(v.ulpdu).first(18), std::span(v.ulpdu).subspan(18), 0,
                          FpduFraming{false, false}),
              v.wire.size());
    auto expect = v.wire;
    std::fill(expect.end() - 4, expect.end(), 0);  // VECTORS §7 file 08
    EXPECT_EQ(out, expect);
}

TEST(Fpdu, GatherPointsIntoUserPayloadWithoutCopying)
{
    std::vector<uint8_t> header(14, 0);
    header[0] = 0xC1;
    header[1] = 0x40;
    std::vector<uint8_t> a(1000, 0xA1), b(3000, 0xB2);
    const std::span<const uint8_t> slices[] = {a, b};
    FpduGather g;
    std::vector<iovec> iov(FpduGather::max_iov(2));
    ASSERT_EQ(g.build(header, slices, 0, FpduFraming{true, true}, iov), FpduGather::Status::ok);
    size_t user_octets = 0;
    size_t markers = 0;
    for (size_t i = 0; i < g.iov_count(); ++i) {
        auto* p = static_cast<const uint8_t*>(iov[i].iov_base);
        const bool in_a = p >= a.data() && p + iov[i].iov_len <= a.data() + a.size();
        const bool in_b = p >= b.data() && p + iov[i].iov_len <= b.data() + b.size();
        if (in_a || in_b) user_octets += iov[i].iov_len;
        if (iov[i].iov_len == 4 && !in_a && !in_b && i + 1 < g.iov_count()) ++markers;
    }
    EXPECT_EQ(user_octets, a.size() + b.size());
    // 4016-octet ULPDU from offset 0: opening marker + markers at 512..3584 in the payload.
    EXPECT_EQ(mpa_markers_in_fpdu(4014, 0), 8u);
    EXPECT_EQ(markers, 7u);  // the opening one lives in the prefix scratch
    EXPECT_EQ(g.wire_length(), mpa_fpdu_wire_length(4014, true, 0));
    const auto bytes = flatten(std::span(iov).first(g.iov_count()));
    EXPECT_EQ(crc32c(std::span(bytes)), crc32c_good_residue);
}

TEST(Fpdu, EncoderLimits)
{
    // MPA-006: a ULPDU above 64768 is never sent (with or without markers).
    std::vector<uint8_t> big(mpa_mulpdu_max - 14 + 1, 0);
    std::vector<uint8_t> header(14, 0);
    header[0] = 0xC1;
    FpduGather g;
    std::vector<iovec> iov(FpduGather::max_iov(1));
    std::span<const uint8_t> slices[] = {big};
    for (bool markers : {false, true}) {
        slices[0] = big;  // ULPDU 64769
        EXPECT_EQ(g.build(header, slices, 0, {true, markers}, iov), FpduGather::Status::ulpdu_too_long);
        slices[0] = std::span(big).first(big.size() - 1);  // exactly 64768
        EXPECT_EQ(g.build(header, slices, 0, {true, markers}, iov), FpduGather::Status::ok);
    }
    std::vector<uint8_t> out(70000);
    EXPECT_EQ(encode_fpdu(out, header, big, 0, {}), 0u);
    EXPECT_EQ(g.build(header, slices, 0, {true, true}, std::span(iov).first(10)),
              FpduGather::Status::iov_too_small);
    std::vector<uint8_t> long_header(FpduGather::max_header + 1, 0x41);
    EXPECT_EQ(g.build(long_header, {}, 0, {}, iov), FpduGather::Status::header_too_long);
    std::vector<uint8_t> small(10);
    EXPECT_EQ(encode_fpdu(small, header, {}, 0, {}), 0u);  // needs 20
}

TEST(Fpdu, MarkersAcrossSequenceWrap)
{
    // Stream offsets are 32-bit: an FPDU starting 8 octets before 2^32
    // gets its marker at offset 0 (= 2^32), FPDUPTR 8.
    std::vector<uint8_t> ulpdu(14 + 20, 0x33);
    ulpdu[0] = 0xC1;
    std::vector<uint8_t> out(64);
    const size_t n = encode_fpdu(out, ulpdu, {}, 0xFFFFFFF8u, {true, true});
    ASSERT_EQ(n, mpa_fpdu_wire_length(ulpdu.size(), true, 0xFFFFFFF8u));
    EXPECT_EQ(n, 2 + 34 + 0 + 4 + 4u);
    EXPECT_EQ(out[8], 0);
    EXPECT_EQ(out[9], 0);
    EXPECT_EQ(out[10], 0);
    EXPECT_EQ(out[11], 8);
}

}  // namespace
}  // namespace iwemu::wire
