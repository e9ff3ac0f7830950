// Terminate header codec (RFC 5040 §4.8), the siw bitfield layout tolerated
// on receive, the Fig. 10 header table and the code names.
#include <gtest/gtest.h>

#include <vector>

#include "emulator/wire/rdmap_message.h"
#include "emulator/wire/terminate_message.h"

namespace iwemu::wire {
namespace {

// Terminate body (after the DDP header) of V-F7: 0/1/00, M D R, 46, the
// V-F3 untagged header and Read Request header.
const std::vector<uint8_t> vf7_body = {
    0x01, 0x00, 0xe0, 0x00, 0x00, 0x2e, 0x41, 0x41, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x01,
    0x00, 0x00, 0x00, 0x01, 0x00, 0x00, 0x00, 0x00, 0xaa, 0xbb, 0xcc, 0xdd, 0x00, 0x00, 0x00, 0x00,
    0x00, 0x00, 0x20, 0x00, 0x00, 0x00, 0x10, 0x00, 0x11, 0x22, 0x33, 0x44, 0x00, 0x00, 0x00, 0x00,
    0x00, 0x00, 0x80, 0x00};

TEST(TerminateDecode, V_F7)
{
    const TerminateMessage t = decode_terminate(vf7_body);
    ASSERT_EQ(t.status, TerminateDecodeStatus::ok);
    EXPECT_EQ(t.layout, TerminateLayout::rfc5040);
    EXPECT_EQ(t.control.code, (TerminateCode{TerminateLayer::rdmap, 1, 0x00}));
    EXPECT_TRUE(t.control.m && t.control.d && t.control.r);
    EXPECT_EQ(t.ddp_segment_length, 46);
    ASSERT_TRUE(t.terminated_ddp_header);
    EXPECT_FALSE(t.terminated_ddp_header->control.tagged);
    EXPECT_EQ(t.terminated_ddp_header->qn, 1u);
    EXPECT_EQ(t.terminated_ddp_octets.size(), 18u);
    ASSERT_TRUE(t.terminated_rdma_header);
    EXPECT_EQ(t.terminated_rdma_header->data_source_stag, 0x11223344u);
    EXPECT_EQ(t.size, vf7_body.size());
}

TEST(TerminateDecode, DdpHeaderLengthFollowsItsOwnTBit)
{
    // 0/1/00 with a *tagged* terminated header (unusual, WIRE §8.4 length 66):
    // the 14-octet length comes from the echoed T bit, not from the EType.
    std::vector<uint8_t> b = {0x01, 0x00, 0xc0, 0x00, 0x00, 0x1e, 0xc1, 0x40, 0x12, 0x34,
                              0x56, 0x78, 0, 0, 0, 0, 0, 0, 0x10, 0x00};
    const TerminateMessage t = decode_terminate(b);
    ASSERT_EQ(t.status, TerminateDecodeStatus::ok);
    ASSERT_TRUE(t.terminated_ddp_header);
    EXPECT_TRUE(t.terminated_ddp_header->control.tagged);
    EXPECT_EQ(t.terminated_ddp_header->stag, 0x12345678u);
    EXPECT_EQ(t.size, 20u);
}

TEST(TerminateDecode, TooShort)
{
    EXPECT_EQ(decode_terminate(std::span(vf7_body.data(), 3)).status, TerminateDecodeStatus::too_short);
    // D and R announced but the headers are cut.
    EXPECT_EQ(decode_terminate(std::span(vf7_body.data(), 40)).status, TerminateDecodeStatus::too_short);
    EXPECT_EQ(decode_terminate(std::span(vf7_body.data(), 6)).status, TerminateDecodeStatus::too_short);
}

TEST(TerminateDecode, UnregisteredCodeIsInconsistent)
{
    const uint8_t b[4] = {0x2F, 0x42, 0x00, 0x00};  // layer 2 etype 15 / siw: layer 15
    const TerminateMessage t = decode_terminate(b);
    EXPECT_EQ(t.status, TerminateDecodeStatus::inconsistent);
    EXPECT_EQ(t.layout, TerminateLayout::rfc5040);
}

// Linux siw 6.1 on x86 lays the control word out with little-endian
// bitfields.  The same V-F7 content from siw: 10 00 07 00.
TEST(TerminateDecode, SiwLayoutWithHeadersIsRecognised)
{
    std::vector<uint8_t> b = vf7_body;
    b[0] = 0x10;
    b[2] = 0x07;
    const TerminateMessage t = decode_terminate(b);
    ASSERT_EQ(t.status, TerminateDecodeStatus::ok);
    EXPECT_EQ(t.layout, TerminateLayout::linux_siw_bitfield);
    EXPECT_EQ(t.control.code, (TerminateCode{TerminateLayer::rdmap, 1, 0x00}));
    EXPECT_TRUE(t.control.m && t.control.d && t.control.r);
    EXPECT_EQ(t.ddp_segment_length, 46);
    ASSERT_TRUE(t.terminated_rdma_header);
    EXPECT_EQ(t.terminated_rdma_header->rdma_read_message_size, 4096u);
}

TEST(TerminateDecode, SiwLayoutWithoutHeadersIsRecognisedByItsNibbles)
{
    // V-F9 (2/0/02, no headers) from siw: 02 02 00 00.  Read as RFC 5040 it
    // would be 0/2/02, which is no registered code.
    const uint8_t b[4] = {0x02, 0x02, 0x00, 0x00};
    const TerminateMessage t = decode_terminate(b);
    ASSERT_EQ(t.status, TerminateDecodeStatus::ok);
    EXPECT_EQ(t.layout, TerminateLayout::linux_siw_bitfield);
    EXPECT_EQ(t.control.code, (TerminateCode{TerminateLayer::llp, 0, 0x02}));
    EXPECT_EQ(t.size, 4u);
}

TEST(TerminateDecode, SiwLayoutDdpTaggedError)
{
    // V-F13 content (1/1/01, M D) in siw layout: 11 01 03 00 — the nibbles
    // are symmetric, the flag bits tell the layout.
    std::vector<uint8_t> b = {0x11, 0x01, 0x03, 0x00, 0x00, 0x1e, 0xc1, 0x40, 0x12, 0x34,
                              0x56, 0x78, 0, 0, 0, 0, 0, 0, 0x10, 0x00};
    const TerminateMessage t = decode_terminate(b);
    ASSERT_EQ(t.status, TerminateDecodeStatus::ok);
    EXPECT_EQ(t.layout, TerminateLayout::linux_siw_bitfield);
    EXPECT_TRUE(t.control.m && t.control.d && !t.control.r);
    EXPECT_EQ(t.ddp_segment_length, 30);
}

TEST(TerminateDecode, AmbiguousWordPrefersRfc)
{
    // 01 00 00 00: RFC 0/1/00 or siw 1/0/00, both registered, no flags.
    const uint8_t b[4] = {0x01, 0x00, 0x00, 0x00};
    const TerminateMessage t = decode_terminate(b);
    EXPECT_EQ(t.layout, TerminateLayout::rfc5040);
    EXPECT_TRUE(t.layout_ambiguous);
    EXPECT_EQ(t.control.code, (TerminateCode{TerminateLayer::rdmap, 1, 0x00}));
}

TEST(TerminateControlWord, BothLayoutsRoundTrip)
{
    const TerminateControl c{{TerminateLayer::ddp, 2, 0x05}, true, true, false, 0};
    uint8_t rfc[4], siw[4];
    encode_terminate_control(c, rfc, TerminateLayout::rfc5040);
    encode_terminate_control(c, siw, TerminateLayout::linux_siw_bitfield);
    EXPECT_EQ(rfc[0], 0x12);
    EXPECT_EQ(rfc[2], 0xC0);
    EXPECT_EQ(siw[0], 0x21);
    EXPECT_EQ(siw[2], 0x03);
    EXPECT_EQ(decode_terminate_control(rfc, TerminateLayout::rfc5040), c);
    EXPECT_EQ(decode_terminate_control(siw, TerminateLayout::linux_siw_bitfield), c);
}

TEST(TerminateHeadersFor, Figure10)
{
    const uint8_t read_request = 0x1, send_inv = 0x4, write = 0x0;
    auto h = terminate_headers_for({TerminateLayer::rdmap, 0, 0}, read_request);
    EXPECT_FALSE(h.ddp || h.rdma);
    h = terminate_headers_for({TerminateLayer::rdmap, 1, 0x00}, read_request);
    EXPECT_TRUE(h.ddp && h.rdma);
    h = terminate_headers_for({TerminateLayer::rdmap, 1, 0x09}, send_inv);
    EXPECT_TRUE(h.ddp && !h.rdma);
    h = terminate_headers_for({TerminateLayer::rdmap, 2, 0x06}, read_request);
    EXPECT_TRUE(h.ddp && !h.rdma);
    h = terminate_headers_for({TerminateLayer::ddp, 1, 0x01}, write);
    EXPECT_TRUE(h.ddp && !h.rdma);
    h = terminate_headers_for({TerminateLayer::llp, 0, 0x02}, write);
    EXPECT_FALSE(h.ddp || h.rdma);
}

TEST(TerminateBuilder, NoOffendingSegmentMeansNoHeaders)
{
    uint8_t out[terminate_ulpdu_max_size];
    const size_t n =
        build_terminate_ulpdu({TerminateCode{TerminateLayer::ddp, 1, 0x00}, {}, std::nullopt}, 3, out);
    ASSERT_EQ(n, 22u);
    EXPECT_EQ(out[13], 3);     // MSN
    EXPECT_EQ(out[18], 0x11);  // layer 1, etype 1
    EXPECT_EQ(out[20], 0x00);  // M=D=R=0
}

TEST(TerminateBuilder, UnknownSegmentLengthClearsM)
{
    const uint8_t seg[14] = {0xC1, 0x40, 0, 0, 0, 9};
    uint8_t out[terminate_ulpdu_max_size];
    const size_t n = build_terminate_ulpdu({TerminateCode{TerminateLayer::ddp, 1, 0x00}, seg, std::nullopt}, 1, out);
    ASSERT_EQ(n, 38u);
    EXPECT_EQ(out[20], 0x40);  // D only
    EXPECT_EQ(out[22], 0);
    EXPECT_EQ(out[23], 0);
}

TEST(TerminateBuilder, RefusesSmallBuffer)
{
    uint8_t out[21];
    EXPECT_EQ(build_terminate_ulpdu({TerminateCode{TerminateLayer::llp, 0, 2}, {}, std::nullopt}, 1, out), 0u);
}

TEST(TerminateCodeNames, EveryRegisteredCodeHasAName)
{
    EXPECT_EQ(terminate_code_name({TerminateLayer::ddp, 1, 0x01}), "DDP/Tagged Buffer/Base or bounds violation");
    EXPECT_EQ(terminate_code_name({TerminateLayer::llp, 0, 0x02}), "LLP/MPA/CRC error");
    EXPECT_EQ(terminate_code_name({TerminateLayer::rdmap, 2, 0x06}), "RDMAP/Remote Operation/Unexpected OpCode");
    EXPECT_EQ(terminate_code_name({TerminateLayer::rdmap, 0, 0x33}), "RDMAP/Local Catastrophic");
    EXPECT_EQ(terminate_code_name({TerminateLayer::ddp, 2, 0x00}), "DDP/Untagged Buffer/undefined code");
    EXPECT_EQ(terminate_code_name({static_cast<TerminateLayer>(7), 0, 0}), "undefined layer");
    EXPECT_EQ(terminate_layer_name(TerminateLayer::llp), "LLP");
    EXPECT_EQ(terminate_etype_name(TerminateLayer::ddp, 2), "Untagged Buffer");
    EXPECT_EQ(terminate_etype_name(TerminateLayer::llp, 1), "undefined EType");
    int defined = 0;
    for (int l = 0; l < 3; ++l)
        for (int e = 0; e < 16; ++e)
            for (int c = 0; c < 256; ++c) {
                const TerminateCode code{static_cast<TerminateLayer>(l), static_cast<uint8_t>(e),
                                         static_cast<uint8_t>(c)};
                EXPECT_FALSE(terminate_code_name(code).empty());
                if (terminate_code_defined(code))
                    ++defined;
                if (terminate_code_defined(code) && !(l == 0 && e == 0) && !(l == 1 && e == 3)) {
                    EXPECT_EQ(terminate_code_name(code).find("undefined"), std::string_view::npos);
                }
            }
    // WIRE §9: 256 (0/0/any) + 13 RDMAP + 1 + 5 + 6 DDP + 256 (1/3/any) + 7 LLP.
    EXPECT_EQ(defined, 256 + 13 + 1 + 5 + 6 + 256 + 7);
}

}  // namespace
}  // namespace iwemu::wire

namespace iwemu::wire {
namespace {

// Whatever the octets, decoding stays inside the body and reports a size
// that fits (run under ASan in the sanitizer build).
TEST(TerminateDecode, ArbitraryOctetsStayInBounds)
{
    uint32_t x = 12345;
    auto next = [&x] {
        x = x * 1103515245u + 12345u;
        return static_cast<uint8_t>(x >> 16);
    };
    for (int round = 0; round < 4000; ++round) {
        const size_t len = next() % 80;
        std::vector<uint8_t> body(len);
        for (auto& b : body)
            b = next();
        if (len > 2 && round % 3 == 0)
            body[2] &= 0xE7;  // make HdrCt combinations likely in both layouts
        const TerminateMessage t = decode_terminate(body);
        EXPECT_LE(t.size, len);
        if (t.status == TerminateDecodeStatus::ok && t.control.d) {
            ASSERT_TRUE(t.terminated_ddp_header);
            EXPECT_EQ(t.terminated_ddp_octets.size(), t.terminated_ddp_header->size());
        }
    }
}

// Builder output decodes back to the same code and headers, for every
// registered code and both kinds of offending segment.
TEST(TerminateBuilder, RoundTripsThroughTheDecoder)
{
    const uint8_t read_request[46] = {0x41, 0x41, 0, 0, 0, 0, 0, 0, 0, 1, 0, 0, 0, 7, 0, 0, 0, 0, 0xAA, 0xBB};
    const uint8_t write[14] = {0xC1, 0x40, 0x12, 0x34, 0x56, 0x78, 0, 0, 0, 0, 0, 0, 0x10, 0x00};
    for (int l = 0; l < 3; ++l)
        for (int e = 0; e < 4; ++e)
            for (int c : {0x00, 0x01, 0x02, 0x04, 0x05, 0x06, 0x09, 0xFF}) {
                const TerminateCode code{static_cast<TerminateLayer>(l), static_cast<uint8_t>(e),
                                         static_cast<uint8_t>(c)};
                if (!terminate_code_defined(code))
                    continue;
                using Seg = std::span<const uint8_t>;
                for (Seg seg : {Seg(read_request), Seg(write)}) {
                    uint8_t out[terminate_ulpdu_max_size];
                    const size_t n = build_terminate_ulpdu({code, seg, static_cast<uint16_t>(seg.size())}, 1, out);
                    ASSERT_GE(n, terminate_ulpdu_min_size);
                    const auto ddp = decode_ddp_header(std::span(out, n));
                    ASSERT_TRUE(ddp);
                    EXPECT_EQ(ddp->qn, 2u);
                    EXPECT_EQ(validate_rdmap_segment(*ddp, n), std::nullopt);
                    const TerminateMessage t = decode_terminate(std::span(out, n).subspan(18));
                    ASSERT_EQ(t.status, TerminateDecodeStatus::ok);
                    EXPECT_EQ(t.layout, TerminateLayout::rfc5040);
                    EXPECT_EQ(t.control.code, code);
                    EXPECT_EQ(t.size, n - 18);
                    const TerminateHeaders want = terminate_headers_for(code, seg[1] & 0xF);
                    EXPECT_EQ(t.control.d, want.ddp);
                    EXPECT_EQ(t.control.r, want.rdma);
                    if (t.control.d) {
                        EXPECT_TRUE(t.control.m);
                        EXPECT_EQ(t.ddp_segment_length, seg.size());
                        EXPECT_TRUE(std::equal(t.terminated_ddp_octets.begin(), t.terminated_ddp_octets.end(),
                                               seg.begin()));
                    }
                }
            }
}

}  // namespace
}  // namespace iwemu::wire
