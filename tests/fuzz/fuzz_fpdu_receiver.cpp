// libFuzzer target: the FPDU receiver fed an arbitrary byte stream.
// Input: 7 option octets, then the stream.
//   [0] bit0 crc, bit1 markers, bits 2-4 chunking (0 whole, 1 one octet,
//       2..7 sizes from the input itself)
//   [1..4] initial stream offset (BE)   [5..6] max_ulpdu_length (0 = 65535)
// Checks: no crash / out-of-bounds (ASan), payload views stay inside the fed
// chunk and are contiguous per segment, segment sizes add up, and push,
// pull and pull-with-framing-in-one-step (consume_framing) agree on every
// event.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <span>
#include <vector>

#include "emulator/wire/fpdu_receiver.h"

using namespace iwemu::wire;

namespace {

[[noreturn]] void fail() { std::abort(); }

struct Trace {
    // Compact event log for comparing push and pull.
    std::vector<uint32_t> events;
    std::span<const uint8_t> chunk;
    uint32_t expect_offset = 0;
    uint32_t payload_len = 0;
    bool in_segment = false;

    void on_segment_header(std::span<const uint8_t> h, uint16_t len)
    {
        if (in_segment || (h.size() != 14 && h.size() != 18) || len < h.size()) fail();
        in_segment = true;
        expect_offset = 0;
        payload_len = len - static_cast<uint32_t>(h.size());
        events.push_back(0x10000u | len);
    }
    void on_payload(std::span<const uint8_t> f, uint32_t off)
    {
        if (!in_segment || off != expect_offset || f.empty()) fail();
        if (f.data() < chunk.data() || f.data() + f.size() > chunk.data() + chunk.size()) fail();
        expect_offset += static_cast<uint32_t>(f.size());
        if (expect_offset > payload_len) fail();
    }
    void on_segment_end()
    {
        if (!in_segment || expect_offset != payload_len) fail();
        in_segment = false;
        events.push_back(0x20000u | payload_len);
    }
    void on_error(const FpduRxError& e)
    {
        if (e.what.empty()) fail();
        events.push_back(0x30000u | static_cast<uint32_t>(e.code.layer) << 12 |
                         uint32_t{e.code.etype} << 8 | e.code.error_code);
    }
};

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size)
{
    if (size < 7) return 0;
    FpduReceiverOptions opt;
    opt.crc = data[0] & 1;
    opt.markers = data[0] & 2;
    const unsigned chunking = (data[0] >> 2) & 7;
    opt.initial_stream_offset = uint32_t{data[1]} << 24 | uint32_t{data[2]} << 16 |
                                uint32_t{data[3]} << 8 | data[4];
    const uint32_t max = uint32_t{data[5]} << 8 | data[6];
    if (max != 0) opt.max_ulpdu_length = max;
    const std::span<const uint8_t> stream(data + 7, size - 7);

    // Push mode.
    FpduReceiver push(opt);
    Trace a;
    size_t pos = 0;
    size_t k = 0;
    while (pos < stream.size() && !push.failed()) {
        size_t n = stream.size() - pos;
        if (chunking == 1) n = 1;
        else if (chunking >= 2) n = std::min<size_t>(n, 1 + stream[k++ % stream.size()] * (chunking - 1));
        a.chunk = stream.subspan(pos, n);
        const size_t used = push.feed(a.chunk, a);
        if (used > n || (used < n && !push.failed())) fail();
        pos += used;
        if (used < n) break;
    }

    // Pull mode over the same octets must tell the same story.
    FpduReceiver pull(opt);
    Trace b;
    pos = 0;
    while (pos < stream.size()) {
        const FpduRxNeed need = pull.next_need();
        if (need.state == FpduRxState::error) break;
        if (need.max_octets == 0) fail();
        const size_t n = std::min<size_t>(need.max_octets, stream.size() - pos);
        const auto bytes = stream.subspan(pos, n);
        if (need.state == FpduRxState::payload) {
            b.chunk = bytes;
            b.on_payload(bytes, pull.payload_received());
        }
        const auto r = pull.consume(bytes);
        if (r.consumed != n) fail();
        pos += n;
        if (r.event == FpduRxEvent::segment_header) b.on_segment_header(pull.ddp_header(), pull.ulpdu_length());
        if (r.event == FpduRxEvent::segment_end) b.on_segment_end();
        if (r.event == FpduRxEvent::error) b.on_error(pull.error());
    }
    if (a.events != b.events) fail();
    if (push.segments_completed() != pull.segments_completed()) fail();

    // Pull mode with framing in one step (consume_framing, the engine's
    // staging path) given everything left: the same story again, and no
    // framing step absorbs payload.
    FpduReceiver framed(opt);
    Trace c;
    pos = 0;
    while (pos < stream.size()) {
        const FpduRxNeed need = framed.next_need();
        if (need.state == FpduRxState::error) break;
        FpduReceiver::ConsumeResult r;
        if (need.state == FpduRxState::payload) {
            const auto bytes = stream.subspan(pos, std::min<size_t>(need.max_octets, stream.size() - pos));
            c.chunk = bytes;
            c.on_payload(bytes, framed.payload_received());
            r = framed.consume(bytes);
            if (r.consumed != bytes.size()) fail();
        } else {
            const uint32_t before = framed.payload_received();
            r = framed.consume_framing(stream.subspan(pos));
            if (r.consumed == 0 || r.consumed > stream.size() - pos) fail();
            if (r.event == FpduRxEvent::none && framed.payload_received() != before) fail();
        }
        pos += r.consumed;
        if (r.event == FpduRxEvent::segment_header) c.on_segment_header(framed.ddp_header(), framed.ulpdu_length());
        if (r.event == FpduRxEvent::segment_end) c.on_segment_end();
        if (r.event == FpduRxEvent::error) c.on_error(framed.error());
    }
    if (a.events != c.events) fail();
    if (push.segments_completed() != framed.segments_completed()) fail();
    return 0;
}
