// draft-03 Start Key codec (seed 000 §8.1.1).  The known answers are built
// from the seed's own text: the key as the ASCII string and as the hex octets
// it lists, then the M/C/Res/Rev octet of iwemu's layout reading.
#include <gtest/gtest.h>

#include <array>
#include <cstring>
#include <string_view>
#include <vector>

#include "emulator/wire/start_key.h"
#include "tests/unit/wire/wire_test_util.h"

namespace iwemu::wire {
namespace {

using test::hex;

// §8.1.1: "the fixed value "MPA ident frame" or (in byte order) 4D 50 41 20
// 69 64 65 6E 74 20 66 72 61 6D 65".
const std::vector<uint8_t> seed_key_hex = hex("4D 50 41 20 69 64 65 6E 74 20 66 72 61 6D 65");

TEST(StartKey, KeyIsTheSeedsStringAndItsHexListing)
{
    constexpr std::string_view text = "MPA ident frame";
    ASSERT_EQ(text.size(), start_key_text_size);
    EXPECT_EQ(0, std::memcmp(text.data(), start_key_text.data(), text.size()));
    EXPECT_EQ(std::vector<uint8_t>(start_key_text.begin(), start_key_text.end()), seed_key_hex);
}

TEST(StartKey, EncodesMarkersAndCrcKnownAnswer)
{
    std::array<uint8_t, 20> out{};
    ASSERT_EQ(encode_start_key({true, true, 0, 0}, out), start_key_size);
    EXPECT_EQ(std::vector<uint8_t>(out.begin(), out.begin() + 16),
              hex("4D 50 41 20 69 64 65 6E 74 20 66 72 61 6D 65 C0"));
    EXPECT_EQ(out[16], 0);  // nothing beyond the 16 octets
    ASSERT_EQ(encode_start_key({false, true, 0, 0}, out), start_key_size);
    EXPECT_EQ(out[15], 0x40);
    ASSERT_EQ(encode_start_key({true, false, 0, 0}, out), start_key_size);
    EXPECT_EQ(out[15], 0x80);
    std::array<uint8_t, 15> small{};
    EXPECT_EQ(encode_start_key({}, small), 0u);
}

TEST(StartKey, ParsesWhatItEncodes)
{
    for (bool m : {false, true})
        for (bool c : {false, true}) {
            std::array<uint8_t, 16> b{};
            ASSERT_EQ(encode_start_key({m, c, 0, 0}, b), 16u);
            const auto r = parse_start_key(b);
            ASSERT_EQ(r.status, StartKeyParseStatus::complete);
            EXPECT_EQ(r.key.marker, m);
            EXPECT_EQ(r.key.crc, c);
        }
}

TEST(StartKey, ReservedBitsAreNotCheckedRevIs)
{
    auto b = seed_key_hex;
    b.push_back(0xC0 | 0x30);  // Res set: "not checked on reception"
    auto r = parse_start_key(b);
    ASSERT_EQ(r.status, StartKeyParseStatus::complete);
    EXPECT_EQ(r.key.res, 0x30);
    b.back() = 0xC1;  // Rev 1: "check this field for zero, and close"
    r = parse_start_key(b);
    EXPECT_EQ(r.status, StartKeyParseStatus::bad_revision);
    EXPECT_TRUE(terminate_code(r.status).has_value());
}

TEST(StartKey, IncompleteKeyAsksForTheRest)
{
    auto r = parse_start_key({});
    EXPECT_EQ(r.status, StartKeyParseStatus::need_more);
    EXPECT_EQ(r.need, 16u);
    r = parse_start_key(std::span(seed_key_hex).first(7));
    EXPECT_EQ(r.status, StartKeyParseStatus::need_more);
    EXPECT_EQ(r.need, 9u);
    r = parse_start_key(seed_key_hex);  // 15: the flags octet missing
    EXPECT_EQ(r.need, 1u);
    r = parse_start_key(seed_key_hex, true);
    EXPECT_EQ(r.status, StartKeyParseStatus::truncated);
}

TEST(StartKey, WrongKeyIsErrorFourAsSoonAsAnOctetDiffers)
{
    // RFC 5044's Request key differs at octet 4 ('I' vs 'i').
    const std::vector<uint8_t> rfc = hex("4D 50 41 20 49");
    auto r = parse_start_key(rfc);
    EXPECT_EQ(r.status, StartKeyParseStatus::bad_key);
    auto b = seed_key_hex;
    b[14] = 'E';  // "MPA ident framE"
    b.push_back(0xC0);
    r = parse_start_key(b);
    EXPECT_EQ(r.status, StartKeyParseStatus::bad_key);
    const auto code = terminate_code(r.status);
    ASSERT_TRUE(code.has_value());
    EXPECT_EQ(code->layer, TerminateLayer::llp);
    EXPECT_EQ(code->error_code, 0x04);  // draft-03 §9 error 4, RFC 5044's 0x04
}

TEST(StartKey, VariantTrailerOnlyZeroOctets)
{
    EXPECT_EQ(start_key_trailer_size({}), 0u);
    EXPECT_EQ(start_key_trailer_size(hex("00")), 1u);           // separate Rev octet
    EXPECT_EQ(start_key_trailer_size(hex("00 00 00")), 3u);     // Rev + PD_Length 0
    EXPECT_EQ(start_key_trailer_size(hex("00 00 00 00")), 3u);  // never more
    EXPECT_EQ(start_key_trailer_size(hex("00 2A")), 1u);
    EXPECT_EQ(start_key_trailer_size(hex("01 00 00")), 0u);     // Rev 1 is not ours to eat
}

TEST(StartKey, ClassifiesTheStartupForm)
{
    EXPECT_EQ(classify_startup({}), StartupForm::undecided);
    EXPECT_EQ(classify_startup(hex("4D 50 41 20")), StartupForm::undecided);  // "MPA "
    EXPECT_EQ(classify_startup(seed_key_hex), StartupForm::start_key);
    EXPECT_EQ(classify_startup(hex("4D 50 41 20 69")), StartupForm::start_key);
    const std::string_view req = "MPA ID Req Frame";
    EXPECT_EQ(classify_startup({reinterpret_cast<const uint8_t*>(req.data()), req.size()}), StartupForm::mpa_frame);
    EXPECT_EQ(classify_startup(hex("47 45 54 20")), StartupForm::neither);  // "GET "
}

TEST(StartKey, EveryFlagsOctetAndEveryPrefix)
{
    for (size_t n = 0; n < start_key_size; ++n) {  // a good key's prefixes only ever ask for the rest
        const auto r = parse_start_key(std::span(seed_key_hex).first(std::min(n, seed_key_hex.size())));
        EXPECT_EQ(r.status, StartKeyParseStatus::need_more);
        EXPECT_EQ(r.need, start_key_size - std::min(n, seed_key_hex.size()));
    }
    for (unsigned f = 0; f < 256; ++f) {
        auto b = seed_key_hex;
        b.push_back(static_cast<uint8_t>(f));
        const auto r = parse_start_key(b);
        ASSERT_EQ(r.status == StartKeyParseStatus::complete, (f & 0x0F) == 0) << f;
        if (r.status != StartKeyParseStatus::complete)
            continue;
        std::array<uint8_t, 16> again{};
        ASSERT_EQ(encode_start_key(r.key, again), 16u);
        EXPECT_EQ(std::vector<uint8_t>(again.begin(), again.end()), b);  // round trip, Res included
    }
}

}  // namespace
}  // namespace iwemu::wire
