// FPDU encoder (RFC 5044 §4.1-§4.4): lays one FPDU out as an iovec list so
// the TX engine can writev() header scratch, user payload and markers
// without copying payload.
#include "emulator/wire/fpdu.h"

#include <algorithm>
#include <cstring>

namespace iwemu::wire {
namespace {

void put_marker(uint8_t* dst, uint32_t fpduptr)
{
    // RFC 5044 §4.2: Reserved (16) = 0, FPDUPTR (16, BE).
    dst[0] = 0;
    dst[1] = 0;
    dst[2] = static_cast<uint8_t>(fpduptr >> 8);
    dst[3] = static_cast<uint8_t>(fpduptr);
}

}  // namespace

FpduGather::Status FpduGather::build(std::span<const uint8_t> header,
                                     std::span<const std::span<const uint8_t>> payload,
                                     uint32_t stream_offset, FpduFraming framing,
                                     std::span<iovec> out)
{
    iov_count_ = 0;
    wire_length_ = 0;
    crc_ = 0;
    next_offset_ = stream_offset;

    if (header.size() > max_header) return Status::header_too_long;
    size_t ulpdu_length = header.size();
    for (const auto& slice : payload) ulpdu_length += slice.size();
    // RFC 5044 §3: DDP never hands MPA a ULPDU above 64768 (MPA-006); the
    // bound also keeps every FPDUPTR within its 16 bits when markers are on.
    if (ulpdu_length > mpa_mulpdu_max) return Status::ulpdu_too_long;

    uint32_t pos = stream_offset;  // stream offset of the next octet emitted
    size_t n = 0;
    bool overflow = false;
    auto push = [&](const void* base, size_t len) {
        if (len == 0) return;
        if (n == out.size()) {
            overflow = true;
            return;
        }
        out[n].iov_base = const_cast<void*>(base);
        out[n].iov_len = len;
        ++n;
    };
    auto marker_due = [&] { return framing.markers && mpa_octets_to_marker(pos) == 0; };
    auto run_to_marker = [&](size_t want) {
        return framing.markers ? std::min<size_t>(want, mpa_octets_to_marker(pos)) : want;
    };

    // Prefix scratch: [opening marker] ULPDU_Length header (a marker may
    // split the header; it can never split ULPDU_Length, both being 4-aligned).
    size_t plen = 0;
    if (marker_due()) {  // case A: opens the FPDU, FPDUPTR 0
        put_marker(&prefix_[plen], 0);
        plen += mpa_marker_size;
        pos += mpa_marker_size;
    }
    const uint32_t fpdu_start = pos;  // offset of ULPDU_Length
    prefix_[plen++] = static_cast<uint8_t>(ulpdu_length >> 8);
    prefix_[plen++] = static_cast<uint8_t>(ulpdu_length);
    pos += mpa_ulpdu_length_size;
    const size_t header_at = plen;  // DDP/RDMAP control octets: never split (4-aligned markers)
    for (size_t h = 0; h < header.size();) {
        if (marker_due()) {  // case B inside the header
            put_marker(&prefix_[plen], pos - fpdu_start);
            plen += mpa_marker_size;
            pos += mpa_marker_size;
        }
        const size_t run = run_to_marker(header.size() - h);
        std::memcpy(&prefix_[plen], header.data() + h, run);
        plen += run;
        h += run;
        pos += static_cast<uint32_t>(run);
    }
    if (header.size() >= 2) set_ulpdu_versions(&prefix_[header_at], framing.ddp_version, framing.rdmap_version);
    push(prefix_.data(), plen);

    // Payload: user memory, cut around markers (case B).
    size_t markers_used = 0;
    for (const auto& slice : payload) {
        for (size_t off = 0; off < slice.size();) {
            if (marker_due()) {
                if (markers_used == max_markers) return Status::ulpdu_too_long;
                auto& word = markers_[markers_used++];
                put_marker(word.data(), pos - fpdu_start);
                push(word.data(), word.size());
                pos += mpa_marker_size;
            }
            const size_t run = run_to_marker(slice.size() - off);
            push(slice.data() + off, run);
            off += run;
            pos += static_cast<uint32_t>(run);
        }
    }

    // Suffix scratch: PAD [marker due after the PAD, case C] CRC.  PAD
    // octets are never on a marker position (they end on a 4-aligned one).
    size_t slen = 0;
    const size_t pad = mpa_pad_length(ulpdu_length);
    std::memset(&suffix_[0], 0, pad);
    slen += pad;
    pos += static_cast<uint32_t>(pad);
    if (marker_due()) {
        put_marker(&suffix_[slen], pos - fpdu_start);
        slen += mpa_marker_size;
        pos += mpa_marker_size;
    }
    const size_t crc_at = slen;
    slen += mpa_crc_size;
    pos += mpa_crc_size;
    push(suffix_.data(), slen);
    if (overflow) return Status::iov_too_small;

    // CRC over every octet laid out before the CRC field (RFC 5044 §4.4).
    uint32_t crc = 0;
    size_t total = 0;
    for (size_t i = 0; i < n; ++i) total += out[i].iov_len;
    if (framing.crc) {
        Crc32c c;
        for (size_t i = 0; i + 1 < n; ++i)
            c.update(static_cast<const uint8_t*>(out[i].iov_base), out[i].iov_len);
        c.update(suffix_.data(), crc_at);
        crc = c.value();
    }
    // CRC off: the field is still sent, as zero (RFC 5044 §4.1, MPA-005).
    store_crc_field(crc, &suffix_[crc_at]);

    iov_count_ = n;
    wire_length_ = total;
    crc_ = crc;
    next_offset_ = pos;
    return Status::ok;
}

size_t encode_fpdu(std::span<uint8_t> out, std::span<const uint8_t> header,
                   std::span<const uint8_t> payload, uint32_t stream_offset, FpduFraming framing)
{
    // Whole ULPDU (header + payload) goes through the gather path; a header
    // longer than the scratch is simply treated as payload.
    const bool header_fits = header.size() <= FpduGather::max_header;
    std::array<std::span<const uint8_t>, 2> slices{header_fits ? payload : header,
                                                   header_fits ? std::span<const uint8_t>{} : payload};
    FpduGather gather;
    std::array<iovec, FpduGather::max_iov(2)> iov;
    const auto status = gather.build(header_fits ? header : std::span<const uint8_t>{}, slices,
                                     stream_offset, framing, iov);
    if (status != FpduGather::Status::ok || gather.wire_length() > out.size()) return 0;
    size_t pos = 0;
    for (size_t i = 0; i < gather.iov_count(); ++i) {
        if (iov[i].iov_len == 0) continue;  // an empty slice may have a null base
        std::memcpy(out.data() + pos, iov[i].iov_base, iov[i].iov_len);
        pos += iov[i].iov_len;
    }
    return pos;
}

}  // namespace iwemu::wire
