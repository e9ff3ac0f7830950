// CRC-32C known answers (VECTORS.md §2, V-C1..V-C7), ISA-L vs the bitwise
// reference, incremental form, field byte order and the receiver residue.
#include "emulator/wire/crc32c.h"

#include <gtest/gtest.h>

#include <array>
#include <cstring>
#include <random>
#include <vector>

#include "tests/unit/wire/wire_test_util.h"

namespace iwemu::wire {
namespace {

struct CrcVector {
    const char* id;
    std::vector<uint8_t> input;
    uint32_t value;
    std::array<uint8_t, 4> field;
};

std::vector<CrcVector> crc_vectors()
{
    std::vector<uint8_t> ascending(32), descending(32);
    for (int i = 0; i < 32; ++i) {
        ascending[i] = static_cast<uint8_t>(i);
        descending[i] = static_cast<uint8_t>(31 - i);
    }
    // RFC 3720 App. B.4 iSCSI READ(10) command PDU.
    const auto read10 = test::hex(
        "01 c0 00 00 00 00 00 00 00 00 00 00 00 00 00 00"
        "14 00 00 00 00 00 04 00 00 00 00 14 00 00 00 18"
        "28 00 00 00 00 00 00 00 02 00 00 00 00 00 00 00");
    const char* digits = "123456789";
    return {
        {"V-C1", std::vector<uint8_t>(digits, digits + 9), 0xE3069283, {0x83, 0x92, 0x06, 0xe3}},
        {"V-C2", std::vector<uint8_t>(32, 0x00), 0x8A9136AA, {0xaa, 0x36, 0x91, 0x8a}},
        {"V-C3", std::vector<uint8_t>(32, 0xFF), 0x62A8AB43, {0x43, 0xab, 0xa8, 0x62}},
        {"V-C4", ascending, 0x46DD794E, {0x4e, 0x79, 0xdd, 0x46}},
        {"V-C5", descending, 0x113FDB5C, {0x5c, 0xdb, 0x3f, 0x11}},
        {"V-C6", read10, 0xD9963A56, {0x56, 0x3a, 0x96, 0xd9}},
        {"V-C7", {}, 0x00000000, {0x00, 0x00, 0x00, 0x00}},
    };
}

TEST(Crc32c, KnownAnswersIsal)
{
    for (const auto& v : crc_vectors()) {
        SCOPED_TRACE(v.id);
        EXPECT_EQ(crc32c(v.input), v.value);
    }
}

TEST(Crc32c, KnownAnswersBitwiseReference)
{
    for (const auto& v : crc_vectors()) {
        SCOPED_TRACE(v.id);
        EXPECT_EQ(crc32c_bitwise(v.input), v.value);
    }
}

TEST(Crc32c, ReferenceIsConstexpr)
{
    static constexpr std::array<uint8_t, 9> digits{'1', '2', '3', '4', '5', '6', '7', '8', '9'};
    static_assert(crc32c_bitwise(digits) == 0xE3069283u);
    SUCCEED();
}

TEST(Crc32c, FieldIsStoredLeastSignificantOctetFirst)
{
    for (const auto& v : crc_vectors()) {
        SCOPED_TRACE(v.id);
        std::array<uint8_t, 4> field{};
        store_crc_field(v.value, field.data());
        EXPECT_EQ(field, v.field);
        EXPECT_EQ(load_crc_field(v.field.data()), v.value);
    }
}

TEST(Crc32c, IncrementalOverAnySplitEqualsOneShot)
{
    std::mt19937 rng(5044);
    std::vector<uint8_t> buf(3000);
    for (auto& b : buf) b = static_cast<uint8_t>(rng());
    const uint32_t whole = crc32c(buf);
    EXPECT_EQ(whole, crc32c_bitwise(buf));
    for (int trial = 0; trial < 200; ++trial) {
        Crc32c c;
        size_t pos = 0;
        while (pos < buf.size()) {
            size_t n = std::min<size_t>(buf.size() - pos, rng() % 70);
            c.update(std::span<const uint8_t>(buf).subspan(pos, n));
            pos += n;
        }
        ASSERT_EQ(c.value(), whole);
    }
}

TEST(Crc32c, RandomLengthsAgreeWithReference)
{
    std::mt19937 rng(3720);
    std::vector<uint8_t> buf(1100);
    for (auto& b : buf) b = static_cast<uint8_t>(rng());
    for (size_t len = 0; len <= buf.size(); len += 1 + len / 8) {
        auto s = std::span<const uint8_t>(buf).first(len);
        ASSERT_EQ(crc32c(s), crc32c_bitwise(s)) << "len " << len;
    }
}

TEST(Crc32c, SmallPiecePathAgreesAtEveryLengthAndAlignment)
{
    // Pieces below 256 octets take the inline SSE4.2 path, larger ones ISA-L.
    std::mt19937 rng(7306);
    std::vector<uint8_t> buf(600);
    for (auto& b : buf) b = static_cast<uint8_t>(rng());
    for (size_t align = 0; align < 8; ++align)
        for (size_t len = 0; len <= 300; ++len) {
            const auto s = std::span<const uint8_t>(buf).subspan(align, len);
            Crc32c c;
            c.update(std::span<const uint8_t>(buf).first(3));  // non-initial register
            c.update(s);
            std::vector<uint8_t> joined(buf.begin(), buf.begin() + 3);
            joined.insert(joined.end(), s.begin(), s.end());
            ASSERT_EQ(c.value(), crc32c_bitwise(joined)) << "align " << align << " len " << len;
        }
}

TEST(Crc32c, ResidueOverDataPlusFieldIsConstant)
{
    for (const auto& v : crc_vectors()) {
        SCOPED_TRACE(v.id);
        std::vector<uint8_t> with_field = v.input;
        with_field.insert(with_field.end(), v.field.begin(), v.field.end());
        EXPECT_EQ(crc32c(with_field), crc32c_good_residue);
    }
}

TEST(Crc32c, ResetStartsOver)
{
    Crc32c c;
    const uint8_t junk[3] = {1, 2, 3};
    c.update(junk, sizeof junk);
    c.reset();
    EXPECT_EQ(c.value(), 0u);
}

}  // namespace
}  // namespace iwemu::wire
