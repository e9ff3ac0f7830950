// libFuzzer target: encoder -> receiver round trip under arbitrary segment
// shapes, payload slicings, framings, stream phases and read chunkings.
// Input: [0] bit0 crc, bit1 markers, bits 2-7 chunk size (0 = whole)
//        [1..4] start stream offset (BE, rounded down to a multiple of 4)
//        then per segment: [ctl] [len_hi] [len_lo] payload octets
//          ctl bit0: tagged; bits 1-2: payload slices (1..3)
// Every segment must come back with the same header and payload.
#include <sys/uio.h>

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <span>
#include <vector>

#include "emulator/wire/fpdu.h"
#include "emulator/wire/fpdu_receiver.h"

using namespace iwemu::wire;

namespace {

[[noreturn]] void fail() { std::abort(); }

struct Segment {
    std::vector<uint8_t> header;
    std::vector<uint8_t> payload;
};

struct Collector {
    std::vector<Segment> got;
    bool ended = true;
    bool error = false;
    void on_segment_header(std::span<const uint8_t> h, uint16_t)
    {
        if (!ended) fail();
        ended = false;
        got.push_back({{h.begin(), h.end()}, {}});
    }
    void on_payload(std::span<const uint8_t> f, uint32_t off)
    {
        if (off != got.back().payload.size()) fail();
        got.back().payload.insert(got.back().payload.end(), f.begin(), f.end());
    }
    void on_segment_end() { ended = true; }
    void on_error(const FpduRxError&) { error = true; }
};

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size)
{
    if (size < 5) return 0;
    const FpduFraming framing{(data[0] & 1) != 0, (data[0] & 2) != 0};
    const size_t chunk = data[0] >> 2;
    const uint32_t start = (uint32_t{data[1]} << 24 | uint32_t{data[2]} << 16 |
                            uint32_t{data[3]} << 8 | data[4]) & ~3u;

    std::vector<Segment> sent;
    std::vector<uint8_t> stream;
    uint32_t offset = start;
    FpduGather gather;
    std::vector<iovec> iov(FpduGather::max_iov(3));
    size_t pos = 5;
    while (pos + 3 <= size && sent.size() < 16) {
        const uint8_t ctl = data[pos];
        size_t len = (size_t{data[pos + 1]} << 8 | data[pos + 2]) % 9000;
        pos += 3;
        Segment s;
        const bool tagged = ctl & 1;
        s.header.assign(tagged ? 14 : 18, static_cast<uint8_t>(ctl));
        s.header[0] = static_cast<uint8_t>((tagged ? 0x80 : 0) | 0x41);
        for (size_t i = 0; i < len; ++i)
            s.payload.push_back(pos + i < size ? data[pos + i] : static_cast<uint8_t>(i));
        pos += std::min(len, size - pos);

        // Cut the payload into 1..3 slices at input-chosen points.
        const size_t nslices = 1 + ((ctl >> 1) & 3) % 3;
        std::span<const uint8_t> slices[3];
        const std::span<const uint8_t> all(s.payload);
        size_t cut1 = len * ((ctl >> 3) & 3) / 4, cut2 = len * (2 + ((ctl >> 5) & 1)) / 4;
        if (nslices == 1) slices[0] = all;
        if (nslices == 2) slices[0] = all.first(cut1), slices[1] = all.subspan(cut1);
        if (nslices == 3) {
            cut2 = std::max(cut1, cut2);
            slices[0] = all.first(cut1), slices[1] = all.subspan(cut1, cut2 - cut1), slices[2] = all.subspan(cut2);
        }
        if (gather.build(s.header, std::span(slices, nslices), offset, framing, iov) != FpduGather::Status::ok)
            fail();
        size_t wire = 0;
        for (size_t i = 0; i < gather.iov_count(); ++i) {
            const auto* p = static_cast<const uint8_t*>(iov[i].iov_base);
            stream.insert(stream.end(), p, p + iov[i].iov_len);
            wire += iov[i].iov_len;
        }
        if (wire != gather.wire_length() ||
            wire != mpa_fpdu_wire_length(s.header.size() + len, framing.markers, offset))
            fail();
        offset = gather.next_stream_offset();
        sent.push_back(std::move(s));
    }

    FpduReceiverOptions opt;
    opt.crc = framing.crc;
    opt.markers = framing.markers;
    opt.initial_stream_offset = start;
    FpduReceiver rx(opt);
    Collector c;
    const std::span<const uint8_t> all(stream);
    for (size_t at = 0; at < all.size();) {
        const size_t n = chunk == 0 ? all.size() - at : std::min(chunk, all.size() - at);
        if (rx.feed(all.subspan(at, n), c) != n) fail();
        at += n;
    }
    if (c.error || !c.ended || c.got.size() != sent.size() || rx.stream_offset() != offset) fail();
    for (size_t i = 0; i < sent.size(); ++i)
        if (c.got[i].header != sent[i].header || c.got[i].payload != sent[i].payload) fail();
    return 0;
}
