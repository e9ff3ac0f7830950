// `iwemu decode`: turn one direction of an iWARP TCP byte stream into one
// text line per unit (MPA startup frame, FPDU), stopping at the first
// malformation with the Terminate code a conformant receiver would send.
#pragma once

#include <cstdint>
#include <cstdio>
#include <optional>
#include <span>

namespace iwemu::tools {

enum class StreamStart : uint8_t {
    mpa,   // the stream begins with the MPA Request or Reply
    fpdu,  // the stream begins at an FPDU boundary in Full Operation
};

struct DecodeOptions {
    StreamStart start = StreamStart::mpa;
    // CRC checked in the FPDU phase; nullopt: the C bit of the startup frame
    // seen (on with --start fpdu).  One direction cannot see the peer's C bit.
    std::optional<bool> crc;
    bool markers = false;   // markers present in this direction
    // `markers` was given (--markers, or the capture's other direction):
    // otherwise a stream opening with a draft-03 Start Key assumes markers,
    // as iwemu and RDMA Consortium-era peers send M=1.
    bool markers_known = false;
    uint32_t offset = 0;    // stream offset of the first FPDU-phase octet, relative to SeqStart
    bool rfc7306 = true;    // accept the RFC 7306 opcodes
    // DDP/RDMAP version of the FPDUs: 1, or 0 (RDMA Consortium, RFC 5044
    // Appendix C).  nullopt: 0 after a Rev 0 startup frame (markers then on
    // too: Rev 0 runs with markers both ways), else 1.
    std::optional<uint8_t> version;
};

// Exit statuses of the decode subcommand.
inline constexpr int decode_ok = 0;
inline constexpr int decode_malformed = 2;

// Decode `stream`, writing lines to `out`.  Returns decode_ok when the whole
// stream decodes, decode_malformed at the first error (after printing
// "error: ..." and, when one applies, "terminate: layer=.. etype=.. code=..").
int decode_stream(std::span<const uint8_t> stream, const DecodeOptions& options, std::FILE* out);

}  // namespace iwemu::tools
