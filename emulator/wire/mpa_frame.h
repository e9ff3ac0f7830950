// MPA startup frames: Request, Reply (RFC 5044 §7.1.1, RFC 6581 §6/§9) and
// the seed-002 Rtr frame (2007 proposal, WIRE.md §4).  Pure codec: parsing
// returns views into the caller's bytes, encoding writes into the caller's
// buffer; nothing allocates.
//
// Layout (20-octet header, then PD_Length octets of Private Data):
//   +0 Key (16) | +16 M C R S Res | +17 Rev | +18 PD_Length (BE) | +20 PD
// With Rev >= 2 and S = 1 the Private Data begins with the 4-octet RFC 6581
// Enhanced Connection Establishment data (A B IRD | C D ORD).  With Rev 1 the
// S bit is only meaningful in seed-002 mode ("an Rtr frame follows" / "I wait
// for it"); the parser reports it as a flag and leaves the meaning to the CM.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <string_view>

#include "emulator/wire/terminate_codes.h"

namespace iwemu::wire {

inline constexpr size_t mpa_key_size = 16;
inline constexpr size_t mpa_frame_header_size = 20;
inline constexpr uint16_t mpa_max_pd_length = 512;       // RFC 5044 §7.1.1
inline constexpr size_t mpa_enhanced_data_size = 4;      // RFC 6581 §9
inline constexpr uint16_t mpa_ird_ord_max = 0x3FFF;      // 14 bits
inline constexpr uint16_t mpa_ird_ord_no_negotiation = 0x3FFF;  // RFC 6581 §9.1

using MpaKey = std::array<uint8_t, mpa_key_size>;

// "MPA ID Req Frame", "MPA ID Rep Frame" (RFC 5044 §7.1.1).
inline constexpr MpaKey mpa_request_key{0x4D, 0x50, 0x41, 0x20, 0x49, 0x44, 0x20, 0x52,
                                        0x65, 0x71, 0x20, 0x46, 0x72, 0x61, 0x6D, 0x65};
inline constexpr MpaKey mpa_reply_key{0x4D, 0x50, 0x41, 0x20, 0x49, 0x44, 0x20, 0x52,
                                      0x65, 0x70, 0x20, 0x46, 0x72, 0x61, 0x6D, 0x65};
// Seed-002 Rtr key as printed in the proposal ("MPA ID RtR Frame", octet 9 =
// 0x52): what iwemu sends (CHECKLIST decision 2).
inline constexpr MpaKey mpa_rtr_key{0x4D, 0x50, 0x41, 0x20, 0x49, 0x44, 0x20, 0x52,
                                    0x74, 0x52, 0x20, 0x46, 0x72, 0x61, 0x6D, 0x65};
// The spelling the proposal's name implies ("MPA ID Rtr Frame", octet 9 =
// 0x72): accepted on receive as well.
inline constexpr MpaKey mpa_rtr_key_as_named{0x4D, 0x50, 0x41, 0x20, 0x49, 0x44, 0x20, 0x52,
                                             0x74, 0x72, 0x20, 0x46, 0x72, 0x61, 0x6D, 0x65};

// Flags octet (+16).
namespace mpa_flag {
inline constexpr uint8_t m = 0x80;  // Marker: peer must send markers toward the sender
inline constexpr uint8_t c = 0x40;  // CRC wanted
inline constexpr uint8_t r = 0x20;  // Reply: reject
inline constexpr uint8_t s = 0x10;  // RFC 6581 enhanced data / seed-002 Rtr
inline constexpr uint8_t res = 0x0F;  // reserved: sent 0, never checked
}  // namespace mpa_flag

// Which of the three startup frames a key names.
enum class MpaFrameType : uint8_t { request, reply, rtr };

// RFC 6581 §9 Enhanced Connection Establishment data.
struct MpaEnhancedData {
    bool peer_to_peer = false;         // A
    bool zero_length_send_rtr = false; // B
    uint16_t ird = 0;                  // 14 bits; 0x3FFF = not negotiated here
    bool zero_length_write_rtr = false;// C
    bool zero_length_read_rtr = false; // D
    uint16_t ord = 0;                  // 14 bits; 0x3FFF = not negotiated here

    bool operator==(const MpaEnhancedData&) const = default;
};

// One startup frame, decoded.  private_data views the parsed input (or, for
// encoding, the caller's bytes); with enhanced data present it is the ULP
// part after the 4 enhanced octets.
struct MpaFrame {
    MpaFrameType type = MpaFrameType::request;
    bool rtr_key_as_named = false;  // Rtr frame used the 0x72 spelling (receive only)
    bool marker = false;   // M
    bool crc = false;      // C
    bool reject = false;   // R (meaningful in a Reply; a field, not an error)
    bool s = false;        // S bit as on the wire
    uint8_t res = 0;       // reserved bits as received (encode: sent as given, normally 0)
    uint8_t rev = 1;       // Rev
    std::optional<MpaEnhancedData> enhanced;  // Rev >= 2 and S = 1
    std::span<const uint8_t> private_data;    // ULP Private Data

    // PD_Length on the wire: enhanced data + ULP private data.
    size_t pd_length() const
    {
        return (enhanced ? mpa_enhanced_data_size : 0) + private_data.size();
    }
    size_t wire_size() const { return mpa_frame_header_size + pd_length(); }
};

enum class MpaParseStatus : uint8_t {
    complete,               // frame parsed; frame_size octets used
    need_more,              // not enough octets yet: at least `need` more
    bad_key,                // key is not one that is expected here (MPA-036/037)
    bad_revision,           // Rev > 2 (MPA-040), or Rev 0 unless accept_rev0
    pd_length_too_large,    // PD_Length > 512 (MPA-041)
    truncated,              // end of stream before the whole frame (MPA-041)
    enhanced_data_missing,  // Rev 2, S = 1, PD_Length < 4 (P2P-013)
};

std::string_view to_string(MpaParseStatus status);

// Terminate code for a parse error: LLP/MPA/0x04 "Invalid MPA Request or
// Reply" for every error (RFC 5044 §8; the frame is improperly formatted);
// nullopt for complete / need_more.
std::optional<TerminateCode> terminate_code(MpaParseStatus status);

struct MpaParseResult {
    MpaParseStatus status = MpaParseStatus::need_more;
    size_t need = 0;        // need_more: minimum further octets before retrying
    size_t frame_size = 0;  // complete: 20 + PD_Length
    MpaFrame frame;         // complete: the fields (private_data views `bytes`)
};

// Parse the startup frame at the start of `bytes` (everything received so
// far; more octets may follow the frame: FPDUs, see frame_size).  `expected`:
// the frame type allowed here, or nullopt to accept any of the three keys.
// Errors are reported as soon as the octets received prove them (a wrong key
// octet is detected before 16 octets are in).  `end_of_stream`: the peer
// closed, so need_more becomes truncated.
// `accept_rev0`: parse a Rev 0 (RDMA Consortium, RFC 5044 Appendix C)
// frame instead of reporting bad_revision; the CM decides what it means.
MpaParseResult parse_mpa_frame(std::span<const uint8_t> bytes,
                               std::optional<MpaFrameType> expected,
                               bool end_of_stream = false, bool accept_rev0 = false);

// Identify a key (16 octets) without parsing the rest.
std::optional<MpaFrameType> mpa_frame_type_of_key(std::span<const uint8_t> key);

// Encode `frame` into `out`.  Returns the octets written (frame.wire_size()),
// or 0 if `out` is too small, PD_Length would exceed 512, or IRD/ORD exceed
// 14 bits.  The S bit is set if frame.s or enhanced data is present.
size_t encode_mpa_frame(const MpaFrame& frame, std::span<uint8_t> out);

// Enhanced data codec (4 octets, network order).
MpaEnhancedData decode_mpa_enhanced_data(std::span<const uint8_t, mpa_enhanced_data_size> in);
void encode_mpa_enhanced_data(const MpaEnhancedData& data,
                              std::span<uint8_t, mpa_enhanced_data_size> out);

}  // namespace iwemu::wire
