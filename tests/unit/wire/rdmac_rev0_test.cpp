// RDMA Consortium (MPA Rev 0 / DDP and RDMAP version 0) on the wire: the two
// annotated FPDUs of seed 000 (draft-culley-iwarp-mpa-03 §7.2, Figures 5 and
// 6) as known-answer tests of the FPDU builder, the receiver and the RDMAP
// validation with version 0, plus Rev 0 startup frames (RFC 5044 App. C).
#include <gtest/gtest.h>

#include <array>
#include <vector>

#include "emulator/wire/crc32c.h"
#include "emulator/wire/ddp_header.h"
#include "emulator/wire/fpdu.h"
#include "emulator/wire/fpdu_receiver.h"
#include "emulator/wire/mpa_frame.h"
#include "emulator/wire/rdmap_message.h"
#include "tests/unit/wire/wire_test_util.h"

namespace iwemu::wire {
namespace {

using test::hex;

// Figure 5: first FPDU of the stream, opening marker, Send with L, QN 0,
// MSN 1, MO 0, 24 zero octets.  Control octets 40 03 (DV 0, RV 0).
const std::vector<uint8_t> seed_figure5 = hex(
    "00 00 00 00"             // marker: reserved, FPDUPTR 0
    "00 2a"                   // ULPDU_Length 42
    "40 03"                   // DDP control (L, DV 0), RDMAP control (RV 0, Send)
    "00 00 00 00"             // reserved (STag position)
    "00 00 00 00"             // QN 0
    "00 00 00 01"             // MSN 1
    "00 00 00 00"             // MO 0
    "00 00 00 00 00 00 00 00 00 00 00 00 00 00 00 00 00 00 00 00 00 00 00 00"
    "4c 86 b3 84");           // CRC32c

// Figure 6: second FPDU, starting at stream offset 492 (0x1ec): MSN 2, the
// marker at 0x200 (FPDUPTR 0x14) between the DDP header and the data.
const std::vector<uint8_t> seed_figure6 = hex(
    "00 2a"
    "40 03"
    "00 00 00 00"
    "00 00 00 00"
    "00 00 00 02"
    "00 00 00 00"
    "00 00 00 14"             // marker at 0x200: FPDUPTR 20
    "00 00 00 00 00 00 00 00 00 00 00 00 00 00 00 00 00 00 00 00 00 00 00 00"
    "a1 9c d1 03");

// The builders' untagged Send header (version 1, as every FPDU builder writes it).
std::vector<uint8_t> send_header(uint32_t msn)
{
    DdpHeader h;
    h.control = DdpControl{false, true, 0, ddp_version};
    h.rsvdulp0 = 0x43;  // RV 1, Send
    h.qn = 0;
    h.msn = msn;
    h.mo = 0;
    std::vector<uint8_t> out(ddp_untagged_header_size);
    EXPECT_EQ(encode_ddp_header(h, out), ddp_untagged_header_size);
    return out;
}

constexpr FpduFraming rdmac{true, true, 0, 0};

TEST(RdmacRev0, SeedCrcValuesCheckOutWithTheRfc5044Method)
{
    // The CRC covers every octet before it, the opening marker included.
    const std::span<const uint8_t> f5(seed_figure5);
    EXPECT_EQ(crc32c(f5.first(f5.size() - 4)), 0x84b3864cu);  // 4C 86 B3 84 on the wire
    const std::span<const uint8_t> f6(seed_figure6);
    EXPECT_EQ(crc32c(f6.first(f6.size() - 4)), 0x03d19ca1u);  // A1 9C D1 03
}

TEST(RdmacRev0, BuilderReproducesSeedFigure5)
{
    const std::array<uint8_t, 24> zeros{};
    std::array<uint8_t, 128> out{};
    const size_t n = encode_fpdu(out, send_header(1), zeros, 0, rdmac);
    ASSERT_EQ(n, seed_figure5.size());
    EXPECT_EQ(std::vector<uint8_t>(out.begin(), out.begin() + n), seed_figure5);
}

TEST(RdmacRev0, BuilderReproducesSeedFigure6WithItsMarker)
{
    const std::array<uint8_t, 24> zeros{};
    std::array<uint8_t, 128> out{};
    const size_t n = encode_fpdu(out, send_header(2), zeros, 0x1ec, rdmac);
    ASSERT_EQ(n, seed_figure6.size());
    EXPECT_EQ(std::vector<uint8_t>(out.begin(), out.begin() + n), seed_figure6);
}

TEST(RdmacRev0, Version1FramingIsUnchanged)
{
    const std::array<uint8_t, 24> zeros{};
    std::array<uint8_t, 128> out{};
    const size_t n = encode_fpdu(out, send_header(1), zeros, 0, FpduFraming{true, true});
    ASSERT_EQ(n, seed_figure5.size());
    EXPECT_EQ(out[6], 0x41);
    EXPECT_EQ(out[7], 0x43);
    EXPECT_NE(std::vector<uint8_t>(out.begin(), out.begin() + n), seed_figure5);  // other CRC too
}

struct Collect {
    std::vector<std::vector<uint8_t>> headers;
    int ends = 0;
    std::optional<FpduRxError> error;
    void on_segment_header(std::span<const uint8_t> h, uint16_t) { headers.emplace_back(h.begin(), h.end()); }
    void on_payload(std::span<const uint8_t>, uint32_t) {}
    void on_segment_end() { ++ends; }
    void on_error(const FpduRxError& e) { error = e; }
};

std::vector<uint8_t> seed_stream()
{
    // Figure 6 says the first FPDU was 492 octets: build that one (a Send
    // like Figure 5's, 464 octets of data), then Figure 6 verbatim.
    std::vector<uint8_t> s(600);
    const std::vector<uint8_t> payload(492 - 4 - 2 - 18 - 4, 0);  // marker, length, header, CRC
    const size_t n1 = encode_fpdu(s, send_header(1), payload, 0, rdmac);
    EXPECT_EQ(n1, 492u);
    s.resize(n1);
    s.insert(s.end(), seed_figure6.begin(), seed_figure6.end());
    return s;
}

TEST(RdmacRev0, ReceiverWithVersion0AcceptsTheSeedStream)
{
    FpduReceiverOptions o;
    o.markers = true;
    o.ddp_version = 0;
    FpduReceiver rx(o);
    Collect c;
    const std::vector<uint8_t> s = seed_stream();
    EXPECT_EQ(rx.feed(s, c), s.size());
    EXPECT_FALSE(c.error) << c.error->what;
    ASSERT_EQ(c.ends, 2);
    ASSERT_EQ(c.headers.size(), 2u);
    const auto h = decode_ddp_header(c.headers[1]);
    ASSERT_TRUE(h);
    EXPECT_EQ(h->msn, 2u);
    EXPECT_FALSE(validate_rdmap_segment(*h, 42, {.version = 0}));
    // An RFC 5040 receiver calls the same header an invalid version.
    EXPECT_EQ(validate_rdmap_segment(*h, 42, {}),
              (TerminateCode{TerminateLayer::ddp, etype::ddp_untagged_buffer,
                             ecode::ddp_untagged_invalid_ddp_version}));
}

TEST(RdmacRev0, Version1ReceiverTerminatesTheSeedFpdu)
{
    FpduReceiverOptions o;
    o.markers = true;
    FpduReceiver rx(o);
    Collect c;
    rx.feed(seed_figure5, c);
    ASSERT_TRUE(c.error);
    EXPECT_EQ(c.error->code, (TerminateCode{TerminateLayer::ddp, etype::ddp_untagged_buffer,
                                             ecode::ddp_untagged_invalid_ddp_version}));
}

TEST(RdmacRev0, Version0ReceiverRefusesVersion1)
{
    // A version-0 connection still checks the version (RDMAP-004).
    const std::array<uint8_t, 24> zeros{};
    std::array<uint8_t, 128> out{};
    const size_t n = encode_fpdu(out, send_header(1), zeros, 0, FpduFraming{true, true});
    FpduReceiverOptions o;
    o.markers = true;
    o.ddp_version = 0;
    FpduReceiver rx(o);
    Collect c;
    rx.feed({out.data(), n}, c);
    ASSERT_TRUE(c.error);
    EXPECT_EQ(c.error->code.error_code, ecode::ddp_untagged_invalid_ddp_version);
    // RV alone wrong: RDMAP 0/2/05.
    auto h = *decode_ddp_header(std::span<const uint8_t>(seed_figure5).subspan(6));
    h.rsvdulp0 = 0x43;
    EXPECT_EQ(validate_rdmap_segment(h, 42, {.version = 0}),
              (TerminateCode{TerminateLayer::rdmap, etype::rdmap_remote_operation,
                             ecode::rdmap_invalid_rdmap_version}));
}

TEST(RdmacRev0, Rev0RequestParsesOnlyWhenAsked)
{
    // RFC 5044 Appendix C: an RDMAC Request is a Request frame with Rev 0, M=1, C=1.
    const std::vector<uint8_t> req = hex("4d 50 41 20 49 44 20 52 65 71 20 46 72 61 6d 65 c0 00 00 00");
    EXPECT_EQ(parse_mpa_frame(req, MpaFrameType::request).status, MpaParseStatus::bad_revision);
    const MpaParseResult r = parse_mpa_frame(req, MpaFrameType::request, false, true);
    ASSERT_EQ(r.status, MpaParseStatus::complete);
    EXPECT_EQ(r.frame.rev, 0);
    EXPECT_TRUE(r.frame.marker);
    EXPECT_TRUE(r.frame.crc);
    EXPECT_EQ(parse_mpa_frame(hex("4d 50 41 20 49 44 20 52 65 71 20 46 72 61 6d 65 c0 03 00 00"),
                              MpaFrameType::request, false, true)
                  .status,
              MpaParseStatus::bad_revision);
    MpaFrame f;
    f.type = MpaFrameType::reply;
    f.marker = f.crc = true;
    f.rev = 0;
    std::array<uint8_t, 20> out{};
    ASSERT_EQ(encode_mpa_frame(f, out), 20u);
    EXPECT_EQ(std::vector<uint8_t>(out.begin(), out.end()),
              hex("4d 50 41 20 49 44 20 52 65 70 20 46 72 61 6d 65 c0 00 00 00"));
}

}  // namespace
}  // namespace iwemu::wire
