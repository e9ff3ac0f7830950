// FPDU receiver: vectors through push mode (whole / 1-octet / random chunks)
// and pull mode, one test per malformation with its Terminate code, and a
// fixed-seed encode -> receive round-trip property test.
#include "emulator/wire/fpdu_receiver.h"

#include <gtest/gtest.h>

#include <random>
#include <string>
#include <vector>

#include "tests/unit/wire/fpdu_vectors.h"

namespace iwemu::wire {
namespace {

using test::fpdu_vectors;
using test::hex;

constexpr TerminateCode llp(uint8_t code) { return {TerminateLayer::llp, etype::llp_mpa, code}; }

// Records what the receiver reports; payload is checked for being a view
// into the fed chunk.
struct Recorder {
    struct Segment {
        std::vector<uint8_t> header;
        uint16_t ulpdu_length = 0;
        std::vector<uint8_t> payload;
        bool ended = false;
    };
    std::vector<Segment> segments;
    std::optional<FpduRxError> error;
    std::span<const uint8_t> chunk;  // current chunk, for the no-copy check
    bool offsets_ok = true;
    bool views_into_chunk = true;

    void on_segment_header(std::span<const uint8_t> h, uint16_t len)
    {
        segments.push_back({{h.begin(), h.end()}, len, {}, false});
    }
    void on_payload(std::span<const uint8_t> f, uint32_t off)
    {
        auto& s = segments.back();
        if (off != s.payload.size()) offsets_ok = false;
        if (f.data() < chunk.data() || f.data() + f.size() > chunk.data() + chunk.size())
            views_into_chunk = false;
        s.payload.insert(s.payload.end(), f.begin(), f.end());
    }
    void on_segment_end() { segments.back().ended = true; }
    void on_error(const FpduRxError& e) { error = e; }
};
static_assert(FpduRxVisitor<Recorder>);

// Feed `stream` in chunks whose sizes come from `next_size`.
template <class F>
size_t feed_chunked(FpduReceiver& rx, Recorder& rec, std::span<const uint8_t> stream, F next_size)
{
    size_t pos = 0;
    while (pos < stream.size() && !rx.failed()) {
        const size_t n = std::min(stream.size() - pos, std::max<size_t>(1, next_size()));
        rec.chunk = stream.subspan(pos, n);
        const size_t used = rx.feed(rec.chunk, rec);
        pos += used;
        if (used < n) break;
    }
    return pos;
}

// Reports a pull-mode event to the recorder; false after an error.
bool record_event(const FpduReceiver& rx, Recorder& rec, FpduRxEvent event)
{
    switch (event) {
    case FpduRxEvent::segment_header: rec.on_segment_header(rx.ddp_header(), rx.ulpdu_length()); break;
    case FpduRxEvent::segment_end: rec.on_segment_end(); break;
    case FpduRxEvent::error: rec.on_error(rx.error()); return false;
    case FpduRxEvent::none: break;
    }
    return true;
}

// Pull mode: read exactly next_need() octets each time, as the engine does.
size_t drive_pull(FpduReceiver& rx, Recorder& rec, std::span<const uint8_t> stream)
{
    size_t pos = 0;
    while (pos < stream.size()) {
        const FpduRxNeed need = rx.next_need();
        if (need.state == FpduRxState::error) break;
        const size_t n = std::min<size_t>(need.max_octets, stream.size() - pos);
        const auto bytes = stream.subspan(pos, n);
        if (need.state == FpduRxState::payload) {
            rec.chunk = bytes;
            rec.on_payload(bytes, rx.payload_received());
        }
        const auto r = rx.consume(bytes);
        EXPECT_EQ(r.consumed, n);
        pos += r.consumed;
        if (!record_event(rx, rec, r.event)) return pos;
    }
    return pos;
}

// Pull mode as the engine drives a staging buffer: payload exactly as
// next_need() says, framing through consume_framing() with everything left
// in the stream (it must stop at the next event and never take payload).
size_t drive_pull_framing(FpduReceiver& rx, Recorder& rec, std::span<const uint8_t> stream)
{
    size_t pos = 0;
    while (pos < stream.size()) {
        const FpduRxNeed need = rx.next_need();
        if (need.state == FpduRxState::error) break;
        FpduReceiver::ConsumeResult r;
        if (need.state == FpduRxState::payload) {
            const auto bytes = stream.subspan(pos, std::min<size_t>(need.max_octets, stream.size() - pos));
            rec.chunk = bytes;
            rec.on_payload(bytes, rx.payload_received());
            r = rx.consume(bytes);
            EXPECT_EQ(r.consumed, bytes.size());
        } else {
            const uint32_t payload_before = rx.payload_received();
            r = rx.consume_framing(stream.subspan(pos));
            if (r.event == FpduRxEvent::none)
                EXPECT_EQ(rx.payload_received(), payload_before) << "framing step took payload";
            EXPECT_GT(r.consumed, 0u);
            if (r.consumed == 0) return pos;
        }
        pos += r.consumed;
        if (!record_event(rx, rec, r.event)) return pos;
    }
    return pos;
}

void expect_vector_segment(const Recorder& rec, const test::FpduVector& v)
{
    ASSERT_FALSE(rec.error.has_value()) << rec.error->what;
    ASSERT_EQ(rec.segments.size(), 1u);
    const auto& s = rec.segments[0];
    const size_t h = test::ddp_header_len(v.ulpdu);
    EXPECT_EQ(s.header, std::vector<uint8_t>(v.ulpdu.begin(), v.ulpdu.begin() + h));
    EXPECT_EQ(s.ulpdu_length, v.ulpdu.size());
    EXPECT_EQ(s.payload, std::vector<uint8_t>(v.ulpdu.begin() + h, v.ulpdu.end()));
    EXPECT_TRUE(s.ended);
    EXPECT_TRUE(rec.offsets_ok);
    EXPECT_TRUE(rec.views_into_chunk);
}

FpduReceiverOptions options_for(const test::FpduVector& v, bool crc = true)
{
    FpduReceiverOptions o;
    o.crc = crc;
    o.markers = v.markers;
    o.initial_stream_offset = v.stream_offset;
    return o;
}

TEST(FpduReceiver, VectorsPushWhole)
{
    for (const auto& v : fpdu_vectors()) {
        SCOPED_TRACE(v.id);
        FpduReceiver rx(options_for(v));
        Recorder rec;
        rec.chunk = v.wire;
        EXPECT_EQ(rx.feed(std::span<const uint8_t>(v.wire), rec), v.wire.size());
        expect_vector_segment(rec, v);
        EXPECT_EQ(rx.last_crc_received(), v.crc);
        EXPECT_EQ(rx.last_crc_computed(), v.crc);
        EXPECT_EQ(rx.stream_offset(), v.stream_offset + v.wire.size());
        EXPECT_EQ(rx.state(), FpduRxState::ulpdu_length);
        EXPECT_EQ(rx.segments_completed(), 1u);
    }
}

TEST(FpduReceiver, VectorsPushOneOctetAtATime)
{
    for (const auto& v : fpdu_vectors()) {
        SCOPED_TRACE(v.id);
        FpduReceiver rx(options_for(v));
        Recorder rec;
        EXPECT_EQ(feed_chunked(rx, rec, v.wire, [] { return 1; }), v.wire.size());
        expect_vector_segment(rec, v);
    }
}

// Exactly next_need() octets at a time, and with framing in one step.
TEST(FpduReceiver, VectorsPull)
{
    for (auto drive : {drive_pull, drive_pull_framing}) {
        SCOPED_TRACE(drive == drive_pull ? "consume" : "consume_framing");
        for (const auto& v : fpdu_vectors()) {
            SCOPED_TRACE(v.id);
            FpduReceiver rx(options_for(v));
            Recorder rec;
            EXPECT_EQ(drive(rx, rec, v.wire), v.wire.size());
            expect_vector_segment(rec, v);
        }
    }
}

// A small FPDU read whole: header in one step, payload, trailer in one step.
TEST(FpduReceiver, ConsumeFramingTakesHeaderAndTrailerInOneStepEach)
{
    const std::vector<uint8_t> header = {0x41, 0x43, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1, 0, 0};  // untagged Send
    const std::vector<uint8_t> payload = {1, 2, 3, 4, 5, 6, 7, 8};
    std::vector<uint8_t> wire(mpa_fpdu_wire_length(header.size() + payload.size(), false, 0));
    ASSERT_EQ(encode_fpdu(wire, header, payload, 0, FpduFraming{true, false}), wire.size());
    FpduReceiver rx;
    const std::span<const uint8_t> all(wire);
    auto r = rx.consume_framing(all);
    EXPECT_EQ(r.consumed, 2 + header.size());
    EXPECT_EQ(r.event, FpduRxEvent::segment_header);
    ASSERT_EQ(rx.next_need().state, FpduRxState::payload);
    r = rx.consume(all.subspan(20, payload.size()));
    EXPECT_EQ(r.event, FpduRxEvent::none);
    r = rx.consume_framing(all.subspan(28));
    EXPECT_EQ(r.consumed, wire.size() - 28);  // PAD + CRC
    EXPECT_EQ(r.event, FpduRxEvent::segment_end);
    EXPECT_EQ(rx.segments_completed(), 1u);

    // The same FPDU with a bad CRC: the one-step trailer reports MPA error 2.
    wire.back() ^= 1;
    FpduReceiver bad;
    ASSERT_EQ(bad.consume_framing(all).event, FpduRxEvent::segment_header);
    bad.consume(all.subspan(20, payload.size()));
    EXPECT_EQ(bad.consume_framing(all.subspan(28)).event, FpduRxEvent::error);
    EXPECT_EQ(bad.error().code, llp(ecode::mpa_crc_error));
}

TEST(FpduReceiver, PullNeedNeverCrossesAMarker)
{
    const auto v = fpdu_vectors()[19];  // V-M3: marker 12 octets in
    ASSERT_STREQ(v.id, "V-M3");
    FpduReceiver rx(options_for(v));
    EXPECT_EQ(rx.next_need().state, FpduRxState::ulpdu_length);
    EXPECT_EQ(rx.next_need().max_octets, 2u);
    rx.consume(std::span(v.wire).first(2));
    EXPECT_EQ(rx.next_need().state, FpduRxState::ddp_header);
    EXPECT_EQ(rx.next_need().max_octets, 10u);  // up to the marker at 512
    rx.consume(std::span(v.wire).subspan(2, 10));
    EXPECT_EQ(rx.next_need().state, FpduRxState::marker);
    EXPECT_EQ(rx.next_need().max_octets, 4u);
    rx.consume(std::span(v.wire).subspan(12, 4));
    EXPECT_EQ(rx.next_need().state, FpduRxState::ddp_header);
    EXPECT_EQ(rx.next_need().max_octets, 8u);  // untagged: 18 − 10
}

TEST(FpduReceiver, ConcatenatedVectorsInRandomChunks)
{
    // All unmarked vectors back to back: one stream, many segments (MPA-001/012).
    std::vector<uint8_t> stream;
    std::vector<test::FpduVector> used;
    for (const auto& v : fpdu_vectors())
        if (!v.markers) {
            stream.insert(stream.end(), v.wire.begin(), v.wire.end());
            used.push_back(v);
        }
    std::mt19937 rng(5041);
    for (int trial = 0; trial < 50; ++trial) {
        FpduReceiver rx;
        Recorder rec;
        ASSERT_EQ(feed_chunked(rx, rec, stream, [&] { return rng() % 40; }), stream.size());
        ASSERT_FALSE(rec.error.has_value());
        ASSERT_EQ(rec.segments.size(), used.size());
        for (size_t i = 0; i < used.size(); ++i) {
            const size_t h = test::ddp_header_len(used[i].ulpdu);
            EXPECT_EQ(rec.segments[i].payload,
                      std::vector<uint8_t>(used[i].ulpdu.begin() + h, used[i].ulpdu.end()));
            EXPECT_TRUE(rec.segments[i].ended);
        }
        EXPECT_TRUE(rec.views_into_chunk);
    }
}

TEST(FpduReceiver, PushAndPullCanBeMixedOnOneStream)
{
    // The engine's pattern: recv() a staging chunk and feed() it (headers,
    // small payload), then readv() the rest of a large payload straight into
    // user memory and consume() it, then go back to feed().
    std::vector<uint8_t> header(14, 0);
    header[0] = 0xC1;
    header[1] = 0x40;
    std::vector<uint8_t> payload(5000);
    for (size_t i = 0; i < payload.size(); ++i) payload[i] = static_cast<uint8_t>(i * 7);
    for (bool markers : {false, true}) {
        SCOPED_TRACE(markers ? "markers" : "no markers");
        const FpduFraming framing{true, markers};
        std::vector<uint8_t> stream(2 * mpa_fpdu_wire_length(header.size() + payload.size(), markers, 0) + 64);
        size_t len = encode_fpdu(stream, header, payload, 0, framing);
        ASSERT_GT(len, 0u);
        const size_t second = encode_fpdu(std::span(stream).subspan(len), header, payload,
                                          static_cast<uint32_t>(len), framing);
        ASSERT_GT(second, 0u);
        stream.resize(len + second);

        FpduReceiverOptions opt;
        opt.markers = markers;
        FpduReceiver rx(opt);
        Recorder rec;
        const std::span<const uint8_t> all(stream);
        rec.chunk = all.first(100);  // header + the start of the payload
        ASSERT_EQ(rx.feed(rec.chunk, rec), 100u);
        ASSERT_EQ(rx.state(), FpduRxState::payload);
        size_t pos = 100;
        // Pull the rest of the first FPDU's payload (and markers) directly.
        while (rx.segments_completed() == 0 && !rx.failed()) {
            const FpduRxNeed need = rx.next_need();
            if (need.state != FpduRxState::payload && need.state != FpduRxState::marker) break;
            const auto bytes = all.subspan(pos, need.max_octets);
            if (need.state == FpduRxState::payload) {
                rec.chunk = bytes;
                rec.on_payload(bytes, rx.payload_received());
            }
            pos += rx.consume(bytes).consumed;
        }
        // Back to push mode for the trailer and the second FPDU.
        rec.chunk = all.subspan(pos);
        EXPECT_EQ(rx.feed(rec.chunk, rec), stream.size() - pos);
        ASSERT_FALSE(rec.error.has_value());
        ASSERT_EQ(rec.segments.size(), 2u);
        for (const auto& s : rec.segments) {
            EXPECT_EQ(s.payload, payload);
            EXPECT_TRUE(s.ended);
        }
        EXPECT_TRUE(rec.offsets_ok);
    }
}

TEST(FpduReceiver, PullModeReportsErrorsThroughConsume)
{
    auto wire = fpdu_vectors()[0].wire;
    wire.back() ^= 0x80;
    FpduReceiver rx;
    Recorder rec;
    EXPECT_EQ(drive_pull(rx, rec, wire), wire.size());
    ASSERT_TRUE(rec.error.has_value());
    EXPECT_EQ(rec.error->code, llp(0x02));
    EXPECT_EQ(rx.error().code, llp(0x02));
    EXPECT_NE(rx.last_crc_received(), rx.last_crc_computed());
    EXPECT_EQ(rx.consume(wire).event, FpduRxEvent::error);
}

TEST(FpduReceiver, AcceptsTheFieldMaximumByDefault)
{
    // We never send a ULPDU above 64768, but tolerate a peer that does: by
    // default the receive limit is the field's own (65535).
    std::vector<uint8_t> wire(2 + 65535 + 3 + 4, 0x5C);
    wire[0] = 0xFF;
    wire[1] = 0xFF;
    wire[2] = 0xC1;  // tagged, L, DV 1
    wire[3] = 0x40;
    std::fill(wire.end() - 7, wire.end() - 4, 0);  // PAD
    store_crc_field(crc32c(std::span(wire).first(wire.size() - 4)), &wire[wire.size() - 4]);
    FpduReceiver rx;
    Recorder rec;
    rec.chunk = wire;
    EXPECT_EQ(rx.feed(std::span<const uint8_t>(wire), rec), wire.size());
    ASSERT_FALSE(rec.error.has_value());
    ASSERT_EQ(rec.segments.size(), 1u);
    EXPECT_EQ(rec.segments[0].payload.size(), 65535u - 14u);
    EXPECT_TRUE(rec.segments[0].ended);
}

TEST(FpduReceiver, CrcOffAcceptsAnyCrcField)
{
    // MPA-005: the field is present; with CRC off any value is accepted.
    for (uint8_t fill : {uint8_t{0x00}, uint8_t{0x5A}}) {
        auto v = fpdu_vectors()[0];  // V-F1
        std::fill(v.wire.end() - 4, v.wire.end(), fill);
        FpduReceiver rx(options_for(v, false));
        Recorder rec;
        rec.chunk = v.wire;
        EXPECT_EQ(rx.feed(std::span<const uint8_t>(v.wire), rec), v.wire.size());
        expect_vector_segment(rec, v);
    }
}

TEST(FpduReceiver, NonZeroPadIsAcceptedWhenCrcMatches)
{
    auto v = fpdu_vectors()[0];  // V-F1, PAD at octet 31
    v.wire[31] = 0x77;
    const uint32_t crc = crc32c(std::span(v.wire).first(32));
    store_crc_field(crc, &v.wire[32]);
    FpduReceiver rx;
    Recorder rec;
    rec.chunk = v.wire;
    rx.feed(std::span<const uint8_t>(v.wire), rec);
    expect_vector_segment(rec, v);
}

// ---- malformations --------------------------------------------------------

struct Outcome {
    Recorder rec;
    size_t consumed;
};

Outcome run(std::vector<uint8_t> wire, FpduReceiverOptions o = {})
{
    Outcome out{};
    FpduReceiver rx(o);
    out.rec.chunk = wire;
    out.consumed = rx.feed(std::span<const uint8_t>(wire), out.rec);
    // Sticky: nothing more is delivered after an error (MPA-053).
    if (rx.failed()) {
        const auto v = fpdu_vectors()[0].wire;
        const size_t before = out.rec.segments.size();
        EXPECT_EQ(rx.feed(std::span<const uint8_t>(v), out.rec), 0u);
        EXPECT_EQ(out.rec.segments.size(), before);
        EXPECT_EQ(rx.next_need().state, FpduRxState::error);
        EXPECT_EQ(rx.consume(v).consumed, 0u);
    }
    // Pull mode through consume_framing() tells the same story.
    FpduReceiver pull(o);
    Recorder prec;
    drive_pull_framing(pull, prec, wire);
    EXPECT_EQ(prec.error.has_value(), out.rec.error.has_value());
    if (prec.error && out.rec.error) EXPECT_EQ(prec.error->code, out.rec.error->code);
    EXPECT_EQ(prec.segments.size(), out.rec.segments.size());
    return out;
}

TEST(FpduReceiverErrors, BadCrcIsMpaError2)
{
    for (size_t flip : {size_t{0}, size_t{3}, size_t{25}, size_t{31}, size_t{35}}) {
        auto wire = fpdu_vectors()[0].wire;
        wire[flip] ^= 0x01;
        if (flip == 0) continue;  // changes ULPDU_Length: covered elsewhere
        auto o = run(wire);
        ASSERT_TRUE(o.rec.error.has_value()) << flip;
        EXPECT_EQ(o.rec.error->code, llp(0x02)) << flip;
        ASSERT_EQ(o.rec.segments.size(), 1u);
        EXPECT_FALSE(o.rec.segments[0].ended);
        EXPECT_EQ(o.consumed, wire.size());
    }
}

TEST(FpduReceiverErrors, MarkerFpduptrWrongIsMpaError3)
{
    auto v = fpdu_vectors()[19];  // V-M3, marker at vector offset 12
    ASSERT_STREQ(v.id, "V-M3");
    v.wire[15] = 0x10;  // FPDUPTR 16 instead of 12
    // Keep the CRC right so the marker check is what fails (MPA-031).
    store_crc_field(crc32c(std::span(v.wire).first(v.wire.size() - 4)), &v.wire[v.wire.size() - 4]);
    auto o = run(v.wire, options_for(v));
    ASSERT_TRUE(o.rec.error.has_value());
    EXPECT_EQ(o.rec.error->code, llp(0x03));
    EXPECT_FALSE(o.rec.segments[0].ended);
}

TEST(FpduReceiverErrors, MarkerFpduptrWrongAndBadCrcIsCrcError)
{
    auto v = fpdu_vectors()[19];
    v.wire[15] = 0x10;
    auto o = run(v.wire, options_for(v));
    ASSERT_TRUE(o.rec.error.has_value());
    EXPECT_EQ(o.rec.error->code, llp(0x02));
}

TEST(FpduReceiverErrors, OpeningMarkerMustBeZero)
{
    auto v = fpdu_vectors()[21];  // V-M5, opening marker
    ASSERT_STREQ(v.id, "V-M5");
    v.wire[3] = 0x04;
    store_crc_field(crc32c(std::span(v.wire).first(v.wire.size() - 4)), &v.wire[v.wire.size() - 4]);
    auto o = run(v.wire, options_for(v));
    ASSERT_TRUE(o.rec.error.has_value());
    EXPECT_EQ(o.rec.error->code, llp(0x03));
}

TEST(FpduReceiverErrors, OpeningMarkerMismatchSurvivesAChunkBoundary)
{
    // Found by fuzzing: the opening marker read on its own, the rest of the
    // FPDU in the next chunk (whole-FPDU fast path) must still report 0x03.
    auto v = fpdu_vectors()[21];  // V-M5
    v.wire[2] = 0x01;             // FPDUPTR 0x100 instead of 0
    store_crc_field(crc32c(std::span(v.wire).first(v.wire.size() - 4)), &v.wire[v.wire.size() - 4]);
    FpduReceiver rx(options_for(v));
    Recorder rec;
    const std::span<const uint8_t> all(v.wire);
    rec.chunk = all.first(4);
    ASSERT_EQ(rx.feed(rec.chunk, rec), 4u);
    rec.chunk = all.subspan(4);
    rx.feed(rec.chunk, rec);
    ASSERT_TRUE(rec.error.has_value());
    EXPECT_EQ(rec.error->code, llp(0x03));
}

TEST(FpduReceiverErrors, FpduptrLowBitsAndReservedAreIgnored)
{
    auto v = fpdu_vectors()[20];  // V-M4, case C marker 00 00 00 20
    ASSERT_STREQ(v.id, "V-M4");
    v.wire[32] = 0xAB;  // Reserved
    v.wire[35] = 0x23;  // FPDUPTR low bits set
    store_crc_field(crc32c(std::span(v.wire).first(v.wire.size() - 4)), &v.wire[v.wire.size() - 4]);
    auto o = run(v.wire, options_for(v));
    EXPECT_FALSE(o.rec.error.has_value());
    ASSERT_EQ(o.rec.segments.size(), 1u);
    EXPECT_TRUE(o.rec.segments[0].ended);
}

TEST(FpduReceiverErrors, UlpduLengthTooSmallForAnyDdpHeader)
{
    auto o = run(hex("00 0d c1 40 00 00 00 00 00 00 00 00 00 00 00 00"));
    ASSERT_TRUE(o.rec.error.has_value());
    EXPECT_EQ(o.rec.error->code, llp(0x03));
    EXPECT_EQ(o.consumed, 2u);  // detected at ULPDU_Length
    EXPECT_TRUE(o.rec.segments.empty());
}

TEST(FpduReceiverErrors, UlpduLengthTooSmallForUntaggedHeader)
{
    // 16 octets announced, but T = 0 needs 18.
    auto o = run(hex("00 10 41 43 00 00 00 00 00 00 00 00 00 00 00 01 00 00 00 00 00 00 00 00"));
    ASSERT_TRUE(o.rec.error.has_value());
    EXPECT_EQ(o.rec.error->code, llp(0x03));
    EXPECT_TRUE(o.rec.segments.empty());  // detected at the first DDP octet
}

TEST(FpduReceiverErrors, UlpduLengthAboveReceiveLimit)
{
    FpduReceiverOptions opt;
    opt.max_ulpdu_length = 1024;
    auto o = run(hex("04 01 c1 40"), opt);
    ASSERT_TRUE(o.rec.error.has_value());
    EXPECT_EQ(o.rec.error->code, llp(0x03));
    // Exactly the limit is fine (header arrives next).
    FpduReceiver rx(opt);
    Recorder rec;
    const auto ok = hex("04 00 c1 40");
    rec.chunk = ok;
    EXPECT_EQ(rx.feed(std::span<const uint8_t>(ok), rec), 4u);
    EXPECT_FALSE(rec.error.has_value());
}

TEST(FpduReceiverErrors, BadDdpVersionTagged)
{
    auto wire = fpdu_vectors()[1].wire;  // V-F2
    wire[2] = 0xC2;                      // DV = 2
    auto o = run(wire);
    ASSERT_TRUE(o.rec.error.has_value());
    EXPECT_EQ(o.rec.error->code, (TerminateCode{TerminateLayer::ddp, etype::ddp_tagged_buffer, 0x04}));
    EXPECT_EQ(o.consumed, 2u + 14u);
}

TEST(FpduReceiverErrors, BadDdpVersionUntagged)
{
    auto wire = fpdu_vectors()[0].wire;  // V-F1
    wire[2] = 0x40;                      // DV = 0
    auto o = run(wire);
    ASSERT_TRUE(o.rec.error.has_value());
    EXPECT_EQ(o.rec.error->code, (TerminateCode{TerminateLayer::ddp, etype::ddp_untagged_buffer, 0x06}));
    EXPECT_EQ(o.consumed, 2u + 18u);
}

TEST(FpduReceiverErrors, ErrorStopsTheFeedMidChunk)
{
    // A bad FPDU followed by a good one in the same chunk: the good one is
    // not delivered (MPA-053).
    auto bad = fpdu_vectors()[0].wire;
    bad[25] ^= 0xFF;
    auto good = fpdu_vectors()[1].wire;
    bad.insert(bad.end(), good.begin(), good.end());
    auto o = run(bad);
    ASSERT_TRUE(o.rec.error.has_value());
    EXPECT_EQ(o.consumed, fpdu_vectors()[0].wire.size());
    EXPECT_EQ(o.rec.segments.size(), 1u);
}

TEST(FpduReceiver, ResetStartsAFreshStream)
{
    FpduReceiver rx;
    Recorder rec;
    const auto junk = hex("00 01");
    rec.chunk = junk;
    rx.feed(std::span<const uint8_t>(junk), rec);
    ASSERT_TRUE(rx.failed());
    const auto v = fpdu_vectors()[19];
    rx.reset(options_for(v));
    Recorder rec2;
    rec2.chunk = v.wire;
    rx.feed(std::span<const uint8_t>(v.wire), rec2);
    expect_vector_segment(rec2, v);
    EXPECT_FALSE(to_string(FpduRxState::marker).empty());
}

// ---- property: encode -> receive ---------------------------------------

TEST(FpduRoundTrip, RandomSegmentsFramingsAndChunkings)
{
    std::mt19937 rng(6581);
    enum Chunking { one_octet, random_chunks, whole, pull, pull_framing };
    for (int trial = 0; trial < 200; ++trial) {
        const FpduFraming framing{(trial & 1) != 0, (trial & 2) != 0};
        const uint32_t start = static_cast<uint32_t>(rng() & ~3u);  // any phase, 4-aligned
        const Chunking chunking = static_cast<Chunking>((trial >> 2) % 5);
        const size_t nseg = chunking == one_octet ? 3 : 6;

        struct Seg { std::vector<uint8_t> header, payload; };
        std::vector<Seg> segs;
        std::vector<uint8_t> stream;
        uint32_t offset = start;
        for (size_t i = 0; i < nseg; ++i) {
            Seg s;
            const bool tagged = rng() & 1;
            s.header.resize(tagged ? 14 : 18);
            for (auto& b : s.header) b = static_cast<uint8_t>(rng());
            s.header[0] = static_cast<uint8_t>((tagged ? 0x80 : 0x00) | (s.header[0] & 0x7C) | 0x01);
            const size_t max_payload = mpa_mulpdu_max - s.header.size();
            size_t len = rng() % 4 == 0 ? rng() % 64 : rng() % (max_payload + 1);
            if (chunking == one_octet) len %= 3000;
            s.payload.resize(len);
            for (auto& b : s.payload) b = static_cast<uint8_t>(rng());
            std::vector<uint8_t> fpdu(mpa_fpdu_wire_length(s.header.size() + len, framing.markers, offset));
            ASSERT_EQ(encode_fpdu(fpdu, s.header, s.payload, offset, framing), fpdu.size());
            offset += static_cast<uint32_t>(fpdu.size());
            stream.insert(stream.end(), fpdu.begin(), fpdu.end());
            segs.push_back(std::move(s));
        }

        FpduReceiverOptions opt;
        opt.crc = framing.crc;
        opt.markers = framing.markers;
        opt.initial_stream_offset = start;
        FpduReceiver rx(opt);
        Recorder rec;
        size_t used = 0;
        switch (chunking) {
        case one_octet: used = feed_chunked(rx, rec, stream, [] { return 1; }); break;
        case random_chunks: used = feed_chunked(rx, rec, stream, [&] { return rng() % 9000; }); break;
        case whole:
            rec.chunk = stream;
            used = rx.feed(std::span<const uint8_t>(stream), rec);
            break;
        case pull: used = drive_pull(rx, rec, stream); break;
        case pull_framing: used = drive_pull_framing(rx, rec, stream); break;
        }
        SCOPED_TRACE("trial " + std::to_string(trial));
        ASSERT_FALSE(rec.error.has_value()) << rec.error->what;
        ASSERT_EQ(used, stream.size());
        ASSERT_EQ(rec.segments.size(), segs.size());
        for (size_t i = 0; i < segs.size(); ++i) {
            EXPECT_EQ(rec.segments[i].header, segs[i].header);
            EXPECT_EQ(rec.segments[i].ulpdu_length, segs[i].header.size() + segs[i].payload.size());
            EXPECT_TRUE(rec.segments[i].payload == segs[i].payload) << "segment " << i;
            EXPECT_TRUE(rec.segments[i].ended);
        }
        EXPECT_TRUE(rec.offsets_ok);
        EXPECT_TRUE(rec.views_into_chunk);
        EXPECT_EQ(rx.stream_offset(), offset);
    }
}

}  // namespace
}  // namespace iwemu::wire
