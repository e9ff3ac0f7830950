// MPA startup frames: VECTORS.md §3 (V-R1..V-R14) parse -> fields -> encode
// -> same bytes; incremental parsing; one test per malformation.
#include "emulator/wire/mpa_frame.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "tests/unit/wire/wire_test_util.h"

namespace iwemu::wire {
namespace {

using test::hex;

constexpr TerminateCode invalid_frame{TerminateLayer::llp, etype::llp_mpa, 0x04};

std::string str(std::span<const uint8_t> s) { return std::string(s.begin(), s.end()); }

struct FrameVector {
    const char* id;
    std::vector<uint8_t> bytes;
    MpaFrameType type;
    bool m, c, r, s;
    uint8_t rev;
    std::optional<MpaEnhancedData> enhanced;
    std::string private_data;
};

std::vector<FrameVector> frame_vectors()
{
    const char* req = "4d 50 41 20 49 44 20 52 65 71 20 46 72 61 6d 65";
    const char* rep = "4d 50 41 20 49 44 20 52 65 70 20 46 72 61 6d 65";
    auto frame = [](const char* key, const char* rest) { return hex(std::string(key) + rest); };
    using T = MpaFrameType;
    return {
        {"V-R1", frame(req, "40 01 00 09 69 77 65 6d 75 2d 72 65 71"), T::request, false, true, false, false, 1, {}, "iwemu-req"},
        {"V-R2", frame(rep, "40 01 00 00"), T::reply, false, true, false, false, 1, {}, ""},
        {"V-R3", frame(rep, "60 01 00 02 6e 6f"), T::reply, false, true, true, false, 1, {}, "no"},
        {"V-R4", frame(req, "50 02 00 07 c0 10 c0 08 61 70 70"), T::request, false, true, false, true, 2,
         MpaEnhancedData{true, true, 16, true, true, 8}, "app"},
        {"V-R5", frame(rep, "50 02 00 04 80 08 80 10"), T::reply, false, true, false, true, 2,
         MpaEnhancedData{true, false, 8, true, false, 16}, ""},
        {"V-R6", frame(req, "50 01 00 00"), T::request, false, true, false, true, 1, {}, ""},
        {"V-R7", hex("4d 50 41 20 49 44 20 52 74 52 20 46 72 61 6d 65 40 01 00 00"), T::rtr, false, true,
         false, false, 1, {}, ""},
        {"V-R9", frame(req, "c0 01 00 00"), T::request, true, true, false, false, 1, {}, ""},
        {"V-R10", frame(rep, "c0 01 00 00"), T::reply, true, true, false, false, 1, {}, ""},
        {"V-R11", frame(req, "00 01 00 00"), T::request, false, false, false, false, 1, {}, ""},
        {"V-R12", frame(rep, "00 01 00 00"), T::reply, false, false, false, false, 1, {}, ""},
        {"V-R13", frame(req, "10 02 00 04 00 10 00 10"), T::request, false, false, false, true, 2,
         MpaEnhancedData{false, false, 16, false, false, 16}, ""},
        {"V-R14", frame(rep, "10 02 00 04 00 10 00 10"), T::reply, false, false, false, true, 2,
         MpaEnhancedData{false, false, 16, false, false, 16}, ""},
    };
}

TEST(MpaFrame, VectorsParseToFieldsAndReencodeToSameBytes)
{
    for (const auto& v : frame_vectors()) {
        SCOPED_TRACE(v.id);
        const auto r = parse_mpa_frame(v.bytes, v.type, true);
        ASSERT_EQ(r.status, MpaParseStatus::complete);
        EXPECT_EQ(r.frame_size, v.bytes.size());
        const MpaFrame& f = r.frame;
        EXPECT_EQ(f.type, v.type);
        EXPECT_EQ(f.marker, v.m);
        EXPECT_EQ(f.crc, v.c);
        EXPECT_EQ(f.reject, v.r);
        EXPECT_EQ(f.s, v.s);
        EXPECT_EQ(f.res, 0);
        EXPECT_EQ(f.rev, v.rev);
        EXPECT_EQ(f.enhanced, v.enhanced);
        EXPECT_EQ(str(f.private_data), v.private_data);
        EXPECT_FALSE(terminate_code(r.status).has_value());

        // Accepting any key gives the same answer.
        EXPECT_EQ(parse_mpa_frame(v.bytes, std::nullopt).frame.type, v.type);

        std::vector<uint8_t> out(v.bytes.size() + 8, 0xEE);
        ASSERT_EQ(encode_mpa_frame(f, out), v.bytes.size());
        out.resize(v.bytes.size());
        EXPECT_EQ(out, v.bytes);
    }
}

TEST(MpaFrame, RtrFrameKeySpelledAsNamedIsAcceptedAndSentAsPrinted)
{
    // V-R8: "MPA ID Rtr Frame" (octet 9 = 0x72).
    const auto bytes = hex("4d 50 41 20 49 44 20 52 74 72 20 46 72 61 6d 65 40 01 00 00");
    const auto r = parse_mpa_frame(bytes, MpaFrameType::rtr);
    ASSERT_EQ(r.status, MpaParseStatus::complete);
    EXPECT_EQ(r.frame.type, MpaFrameType::rtr);
    EXPECT_TRUE(r.frame.rtr_key_as_named);
    EXPECT_TRUE(r.frame.crc);
    EXPECT_EQ(r.frame.rev, 1);
    // Encoding always uses the printed spelling (decision 2): V-R7.
    std::vector<uint8_t> out(20);
    ASSERT_EQ(encode_mpa_frame(r.frame, out), 20u);
    EXPECT_EQ(out, hex("4d 50 41 20 49 44 20 52 74 52 20 46 72 61 6d 65 40 01 00 00"));
}

TEST(MpaFrame, IncrementalParsingOctetByOctet)
{
    for (const auto& v : frame_vectors()) {
        SCOPED_TRACE(v.id);
        for (size_t have = 0; have < v.bytes.size(); ++have) {
            const auto r = parse_mpa_frame(std::span(v.bytes).first(have), v.type);
            ASSERT_EQ(r.status, MpaParseStatus::need_more) << have;
            ASSERT_GE(r.need, 1u);
            ASSERT_LE(have + r.need, v.bytes.size()) << "need overshoots the frame";
            const auto t = parse_mpa_frame(std::span(v.bytes).first(have), v.type, true);
            ASSERT_EQ(t.status, MpaParseStatus::truncated);
            EXPECT_EQ(terminate_code(t.status), invalid_frame);
        }
    }
}

TEST(MpaFrame, TrailingOctetsAreNotPartOfTheFrame)
{
    auto bytes = frame_vectors()[1].bytes;  // V-R2
    bytes.insert(bytes.end(), {0x00, 0x1d, 0x41, 0x43});  // an FPDU follows
    const auto r = parse_mpa_frame(bytes, MpaFrameType::reply);
    ASSERT_EQ(r.status, MpaParseStatus::complete);
    EXPECT_EQ(r.frame_size, 20u);
}

TEST(MpaFrame, WrongKeyOctetIsDetectedAsSoonAsItArrives)
{
    auto bytes = frame_vectors()[0].bytes;  // V-R1
    bytes[5] ^= 0x01;
    for (size_t have = 6; have <= bytes.size(); ++have) {
        const auto r = parse_mpa_frame(std::span(bytes).first(have), MpaFrameType::request);
        EXPECT_EQ(r.status, MpaParseStatus::bad_key) << have;
    }
    EXPECT_EQ(parse_mpa_frame(std::span(bytes).first(5), MpaFrameType::request).status,
              MpaParseStatus::need_more);
    EXPECT_EQ(terminate_code(MpaParseStatus::bad_key), invalid_frame);
}

TEST(MpaFrame, RequestWhereReplyExpectedIsBadKey)
{
    // Initiator/Initiator start (MPA-037).
    const auto r = parse_mpa_frame(frame_vectors()[0].bytes, MpaFrameType::reply);
    EXPECT_EQ(r.status, MpaParseStatus::bad_key);
}

TEST(MpaFrame, Draft03StartKeyIsBadKey)
{
    // Seed 000 "MPA ident frame": recognised only as a wrong key.
    const auto r = parse_mpa_frame(hex("4d 50 41 20 69 64 65 6e 74 20 66 72 61 6d 65"), std::nullopt);
    EXPECT_EQ(r.status, MpaParseStatus::bad_key);
}

TEST(MpaFrame, RevisionZeroAndThreeAreRefused)
{
    for (uint8_t rev : {uint8_t{0}, uint8_t{3}, uint8_t{0xFF}}) {
        auto bytes = frame_vectors()[1].bytes;  // V-R2
        bytes[17] = rev;
        // Known after 18 octets already.
        EXPECT_EQ(parse_mpa_frame(std::span(bytes).first(18), MpaFrameType::reply).status,
                  MpaParseStatus::bad_revision);
        const auto r = parse_mpa_frame(bytes, MpaFrameType::reply);
        EXPECT_EQ(r.status, MpaParseStatus::bad_revision);
        EXPECT_EQ(terminate_code(r.status), invalid_frame);
    }
}

TEST(MpaFrame, PdLengthOver512IsRefused)
{
    auto bytes = frame_vectors()[1].bytes;
    bytes[18] = 0x02;
    bytes[19] = 0x01;  // 513
    const auto r = parse_mpa_frame(bytes, MpaFrameType::reply);
    EXPECT_EQ(r.status, MpaParseStatus::pd_length_too_large);
    EXPECT_EQ(terminate_code(r.status), invalid_frame);

    bytes[19] = 0x00;  // exactly 512: fine once the data is there
    EXPECT_EQ(parse_mpa_frame(bytes, MpaFrameType::reply).status, MpaParseStatus::need_more);
    EXPECT_EQ(parse_mpa_frame(bytes, MpaFrameType::reply).need, 512u);
    bytes.resize(20 + 512, 0x5A);
    const auto ok = parse_mpa_frame(bytes, MpaFrameType::reply);
    ASSERT_EQ(ok.status, MpaParseStatus::complete);
    EXPECT_EQ(ok.frame.private_data.size(), 512u);
}

TEST(MpaFrame, PdLengthLongerThanDataThenEndOfStreamIsTruncated)
{
    auto bytes = frame_vectors()[0].bytes;  // V-R1, PD_Length 9
    bytes.pop_back();
    EXPECT_EQ(parse_mpa_frame(bytes, MpaFrameType::request).status, MpaParseStatus::need_more);
    EXPECT_EQ(parse_mpa_frame(bytes, MpaFrameType::request).need, 1u);
    const auto r = parse_mpa_frame(bytes, MpaFrameType::request, true);
    EXPECT_EQ(r.status, MpaParseStatus::truncated);
    EXPECT_EQ(terminate_code(r.status), invalid_frame);
}

TEST(MpaFrame, Rev2WithSAndShortPrivateDataIsEnhancedDataMissing)
{
    for (uint8_t pd : {uint8_t{0}, uint8_t{3}}) {
        auto bytes = hex("4d 50 41 20 49 44 20 52 65 71 20 46 72 61 6d 65 50 02 00 00 01 02 03");
        bytes[19] = pd;
        bytes.resize(20 + pd);
        const auto r = parse_mpa_frame(bytes, MpaFrameType::request);
        EXPECT_EQ(r.status, MpaParseStatus::enhanced_data_missing) << int(pd);
        EXPECT_EQ(terminate_code(r.status), invalid_frame);
    }
}

TEST(MpaFrame, Rev2WithoutSIsAPlainFrame)
{
    // Decision 13: accept Rev 2 with S = 0 as a plain frame.
    const auto bytes = hex("4d 50 41 20 49 44 20 52 65 71 20 46 72 61 6d 65 40 02 00 02 68 69");
    const auto r = parse_mpa_frame(bytes, MpaFrameType::request);
    ASSERT_EQ(r.status, MpaParseStatus::complete);
    EXPECT_FALSE(r.frame.enhanced.has_value());
    EXPECT_EQ(str(r.frame.private_data), "hi");
}

TEST(MpaFrame, ReservedBitsAreReportedNotChecked)
{
    // MPA-039: Res = 0x0F accepted (siw's private 0x08 "GSO" bit among them).
    auto bytes = frame_vectors()[9].bytes;  // V-R11
    bytes[16] = 0x0F;
    const auto r = parse_mpa_frame(bytes, MpaFrameType::request);
    ASSERT_EQ(r.status, MpaParseStatus::complete);
    EXPECT_EQ(r.frame.res, 0x0F);
    EXPECT_FALSE(r.frame.s);
}

TEST(MpaFrame, RejectIsAFieldNotAnError)
{
    const auto r = parse_mpa_frame(frame_vectors()[2].bytes, MpaFrameType::reply);  // V-R3
    ASSERT_EQ(r.status, MpaParseStatus::complete);
    EXPECT_TRUE(r.frame.reject);
}

TEST(MpaFrame, EnhancedDataEdgeValuesRoundTrip)
{
    MpaEnhancedData d{true, false, mpa_ird_ord_no_negotiation, false, true, mpa_ird_ord_no_negotiation};
    std::array<uint8_t, 4> b{};
    encode_mpa_enhanced_data(d, b);
    EXPECT_EQ(b, (std::array<uint8_t, 4>{0xBF, 0xFF, 0x7F, 0xFF}));
    EXPECT_EQ(decode_mpa_enhanced_data(b), d);
}

TEST(MpaFrame, EncoderRefusesOversizedOrOutOfRangeFrames)
{
    std::vector<uint8_t> pd(509, 0x11);
    MpaFrame f;
    f.type = MpaFrameType::request;
    f.rev = 2;
    f.enhanced = MpaEnhancedData{};
    f.private_data = pd;  // 4 + 509 > 512
    std::vector<uint8_t> out(1024);
    EXPECT_EQ(encode_mpa_frame(f, out), 0u);
    f.private_data = std::span(pd).first(508);
    EXPECT_EQ(encode_mpa_frame(f, out), 20u + 512u);
    EXPECT_EQ(encode_mpa_frame(f, std::span(out).first(531)), 0u);  // buffer too small
    f.enhanced->ird = 0x4000;
    EXPECT_EQ(encode_mpa_frame(f, out), 0u);
}

TEST(MpaFrame, KeyIdentification)
{
    EXPECT_EQ(mpa_frame_type_of_key(mpa_request_key), MpaFrameType::request);
    EXPECT_EQ(mpa_frame_type_of_key(mpa_reply_key), MpaFrameType::reply);
    EXPECT_EQ(mpa_frame_type_of_key(mpa_rtr_key), MpaFrameType::rtr);
    EXPECT_EQ(mpa_frame_type_of_key(mpa_rtr_key_as_named), MpaFrameType::rtr);
    EXPECT_FALSE(mpa_frame_type_of_key(std::span(mpa_reply_key).first(15)).has_value());
    for (auto s : {MpaParseStatus::complete, MpaParseStatus::need_more, MpaParseStatus::bad_key,
                   MpaParseStatus::bad_revision, MpaParseStatus::pd_length_too_large,
                   MpaParseStatus::truncated, MpaParseStatus::enhanced_data_missing})
        EXPECT_FALSE(to_string(s).empty());
}

}  // namespace
}  // namespace iwemu::wire
