// MPA FPDU framing (RFC 5044 §4): ULPDU_Length, PAD, CRC, markers, MULPDU.
//
//   FPDU = ULPDU_Length (2, BE) | ULPDU (L) | PAD (0..3 zero octets) | CRC (4, LSB first)
//
// With markers on, a 4-octet marker (Reserved 16 | FPDUPTR 16) sits at every
// stream offset that is a multiple of 512 relative to SeqStart of the
// direction (32-bit arithmetic); FPDUPTR counts octets from this FPDU's
// ULPDU_Length to the marker, 0 for a marker that opens the FPDU.  The CRC
// covers every octet of the FPDU before the CRC field, markers included
// (RFC 5044 §4.3, §4.4; WIRE.md §6.3 cases A/B/C).
//
// The TX side never copies payload: FpduGather lays an FPDU out as an iovec
// list (prefix scratch = opening marker, ULPDU_Length, ULP header with any
// marker inside it; user payload slices cut around markers; marker words;
// suffix scratch = PAD, trailing marker, CRC) ready for writev().
#pragma once

#include <sys/uio.h>

#include <array>
#include <cstddef>
#include <cstdint>
#include <span>

#include "emulator/wire/crc32c.h"

namespace iwemu::wire {

inline constexpr size_t mpa_ulpdu_length_size = 2;
inline constexpr size_t mpa_marker_size = 4;
inline constexpr uint32_t mpa_marker_interval = 512;    // RFC 5044 §4.3
inline constexpr uint32_t mpa_mulpdu_min = 128;         // RFC 5044 §3
inline constexpr uint32_t mpa_mulpdu_max = 64768;       // RFC 5044 §3
inline constexpr uint32_t mpa_ulpdu_length_max = 0xFFFF; // field limit
inline constexpr size_t ddp_tagged_header_size = 14;    // RFC 5041 §4.2
inline constexpr size_t ddp_untagged_header_size = 18;  // RFC 5041 §4.3
inline constexpr uint8_t ddp_control_t = 0x80;          // T bit, first ULPDU octet
inline constexpr uint8_t ddp_control_dv_mask = 0x03;    // DV, first ULPDU octet
inline constexpr uint8_t ddp_version = 1;

// Framing of one direction (from the negotiated M and C bits).
struct FpduFraming {
    bool crc = true;       // CRC generated/checked; when off the field is still sent (as 0)
    bool markers = false;  // markers every 512 octets from SeqStart
    // DDP DV and RDMAP RV written into every FPDU's first two ULPDU octets: 1
    // (RFC 5041/5040), or 0 on a connection switched to RDMA Consortium
    // behaviour (RFC 5044 Appendix C, permissive).  A per-connection constant.
    uint8_t ddp_version = 1;
    uint8_t rdmap_version = 1;
};

// Translate the first two ULPDU octets (DDP control, RDMAP control), written
// by the FPDU builders with DV = RV = 1, to the connection's versions.  XOR,
// so version 1 framing leaves the octets as given (a test's deliberately
// wrong version stays wrong) and no branch is added per FPDU.
inline void set_ulpdu_versions(uint8_t* ulpdu, uint8_t dv, uint8_t rv)
{
    ulpdu[0] = static_cast<uint8_t>(ulpdu[0] ^ ((dv ^ 1) & 0x03));
    ulpdu[1] = static_cast<uint8_t>(ulpdu[1] ^ (((rv ^ 1) & 0x03) << 6));
}

// PAD octets after a ULPDU of `ulpdu_length` octets (RFC 5044 §4.1).
constexpr size_t mpa_pad_length(size_t ulpdu_length)
{
    return (4 - (mpa_ulpdu_length_size + ulpdu_length) % 4) % 4;
}

// DDP header length announced by the first ULPDU octet (T bit).
constexpr size_t ddp_header_size(uint8_t ddp_control)
{
    return (ddp_control & ddp_control_t) ? ddp_tagged_header_size : ddp_untagged_header_size;
}

// Octets from stream offset `offset` (relative to SeqStart, mod 2^32) to the
// next marker position; 0 if a marker is due at `offset`.
constexpr uint32_t mpa_octets_to_marker(uint32_t offset)
{
    return (mpa_marker_interval - offset % mpa_marker_interval) % mpa_marker_interval;
}

// Markers an FPDU carrying an `ulpdu_length`-octet ULPDU contains when it
// starts at stream offset `offset` (opening marker and one before the CRC
// included).
constexpr uint32_t mpa_markers_in_fpdu(size_t ulpdu_length, uint32_t offset)
{
    // Walk the FPDU marker by marker (at most ~130 steps): a marker is due
    // whenever the next octet to emit sits on a 512 boundary; the CRC field
    // never does (4-aligned), so a marker due after the PAD is counted too.
    size_t remaining = mpa_ulpdu_length_size + ulpdu_length + mpa_pad_length(ulpdu_length);
    uint32_t pos = offset;
    uint32_t count = 0;
    if (mpa_octets_to_marker(pos) == 0) {
        ++count;
        pos += mpa_marker_size;
    }
    while (remaining > 0) {
        const size_t gap = mpa_octets_to_marker(pos);
        const size_t run = gap < remaining ? gap : remaining;
        remaining -= run;
        pos += static_cast<uint32_t>(run);
        if (mpa_octets_to_marker(pos) == 0) {
            ++count;
            pos += mpa_marker_size;
        }
    }
    return count;
}

// On-wire octets of that FPDU: 2 + L + PAD + 4 + 4 per marker (RFC 5044 §4.1).
constexpr size_t mpa_fpdu_wire_length(size_t ulpdu_length, bool markers, uint32_t offset = 0)
{
    return mpa_ulpdu_length_size + ulpdu_length + mpa_pad_length(ulpdu_length) + mpa_crc_size +
           (markers ? mpa_marker_size * mpa_markers_in_fpdu(ulpdu_length, offset) : 0);
}

// MULPDU from the effective MSS (RFC 5044 §4.5), clamped to 128..64768.
constexpr uint32_t mpa_mulpdu(uint32_t emss, bool markers)
{
    int64_t v = int64_t{emss} - (6 + int64_t{emss % 4});
    if (markers)
        v -= 4 * ((int64_t{emss} + mpa_marker_interval - 1) / mpa_marker_interval);
    if (v < mpa_mulpdu_min) v = mpa_mulpdu_min;
    if (v > mpa_mulpdu_max) v = mpa_mulpdu_max;
    return static_cast<uint32_t>(v);
}

// Zero-copy layout of one FPDU as an iovec list.  The object owns the small
// scratch the iovecs point into (prefix, marker words, suffix): keep it alive
// until the writev() of those iovecs has finished.  Payload iovecs point into
// the caller's memory.  Reusable: each build() overwrites the previous one.
class FpduGather {
public:
    // Largest ULP header (DDP + RDMAP header octets copied into scratch).
    static constexpr size_t max_header = 128;
    // Markers one FPDU can contain: (2 + 65535 + 3 + 4) / 512 + 2.
    static constexpr size_t max_markers = 132;

    enum class Status : uint8_t {
        ok,
        ulpdu_too_long,    // header + payload > 64768 (RFC 5044 §3; caller enforces MULPDU)
        header_too_long,   // header > max_header
        iov_too_small,     // `out` cannot hold the pieces
    };

    // Lay out the FPDU carrying header ‖ payload[0] ‖ payload[1] ‖ … starting
    // at stream offset `stream_offset` of this direction.  On ok, the first
    // iov_count() entries of `out` hold the FPDU in order; the CRC is
    // computed over them (when framing.crc) and stored in the suffix.
    Status build(std::span<const uint8_t> header,
                 std::span<const std::span<const uint8_t>> payload,
                 uint32_t stream_offset, FpduFraming framing, std::span<iovec> out);

    size_t iov_count() const { return iov_count_; }
    size_t wire_length() const { return wire_length_; }  // octets in the iovecs
    uint32_t crc() const { return crc_; }                // CRC value sent (0 if off)
    // Stream offset just after this FPDU (input for the next build()).
    uint32_t next_stream_offset() const { return next_offset_; }

    // iovecs a build() can need for `payload_slices` slices at most:
    // prefix + suffix + per marker (payload slice split + marker word).
    static constexpr size_t max_iov(size_t payload_slices)
    {
        return 2 + payload_slices + 2 * max_markers;
    }

private:
    std::array<uint8_t, mpa_marker_size + mpa_ulpdu_length_size + max_header + 2 * mpa_marker_size>
        prefix_{};
    std::array<std::array<uint8_t, mpa_marker_size>, max_markers> markers_{};
    std::array<uint8_t, 3 + mpa_marker_size + mpa_crc_size> suffix_{};
    size_t iov_count_ = 0;
    size_t wire_length_ = 0;
    uint32_t crc_ = 0;
    uint32_t next_offset_ = 0;
};

// Convenience: write one whole FPDU contiguously into `out` (copies the
// payload; for control messages, tests and tools).  Returns octets written or
// 0 if `out` is too small or the FPDU invalid (see FpduGather::Status).
size_t encode_fpdu(std::span<uint8_t> out, std::span<const uint8_t> header,
                   std::span<const uint8_t> payload, uint32_t stream_offset,
                   FpduFraming framing);

}  // namespace iwemu::wire
