// Terminate error identification: Layer / EType / Error Code.
// RFC 5040 §4.8 (RDMAP), RFC 5041 §7.2 (DDP), RFC 5044 §8 and RFC 6581 §8 (MPA),
// consolidated in RFC 6580 §3.  Shared by every codec that can detect an error.
#pragma once

#include <cstdint>
#include <string_view>

namespace iwemu::wire {

// RFC 5040 §4.8 "Layer" nibble.
enum class TerminateLayer : uint8_t {
    rdmap = 0x0,
    ddp = 0x1,
    llp = 0x2,  // the Lower Layer Protocol: MPA (and below it TCP)
};

// EType values per layer (the nibble after Layer).
namespace etype {
// RDMAP layer
inline constexpr uint8_t rdmap_local_catastrophic = 0x0;
inline constexpr uint8_t rdmap_remote_protection = 0x1;
inline constexpr uint8_t rdmap_remote_operation = 0x2;
// DDP layer
inline constexpr uint8_t ddp_local_catastrophic = 0x0;
inline constexpr uint8_t ddp_tagged_buffer = 0x1;
inline constexpr uint8_t ddp_untagged_buffer = 0x2;
inline constexpr uint8_t ddp_rsvd_for_llp = 0x3;
// LLP layer
inline constexpr uint8_t llp_mpa = 0x0;
}  // namespace etype

// Error Code values, grouped by (layer, etype).
namespace ecode {
// RDMAP, Local Catastrophic Error: any code; iwemu sends 0x00.
inline constexpr uint8_t rdmap_local_catastrophic_error = 0x00;
// DDP, Local Catastrophic Error: code 0x00 (RFC 5041 §7.2).
inline constexpr uint8_t ddp_local_catastrophic_error = 0x00;
// RDMAP, Remote Protection Error (RFC 5040 §4.8)
inline constexpr uint8_t rdmap_invalid_stag = 0x00;
inline constexpr uint8_t rdmap_base_or_bounds_violation = 0x01;
inline constexpr uint8_t rdmap_access_rights_violation = 0x02;
inline constexpr uint8_t rdmap_stag_not_associated = 0x03;
inline constexpr uint8_t rdmap_to_wrap = 0x04;
inline constexpr uint8_t rdmap_stag_cannot_be_invalidated = 0x09;
inline constexpr uint8_t rdmap_unspecified = 0xFF;
// RDMAP, Remote Operation Error
inline constexpr uint8_t rdmap_invalid_rdmap_version = 0x05;
inline constexpr uint8_t rdmap_unexpected_opcode = 0x06;
inline constexpr uint8_t rdmap_catastrophic_localized = 0x07;
inline constexpr uint8_t rdmap_catastrophic_global = 0x08;
// (0x09 "STag cannot be Invalidated" and 0xFF "Unspecified Error" exist for
// this EType too, with the same values as under Remote Protection.)
// DDP, Tagged Buffer Error (RFC 5041 §7.2)
inline constexpr uint8_t ddp_tagged_invalid_stag = 0x00;
inline constexpr uint8_t ddp_tagged_base_or_bounds_violation = 0x01;
inline constexpr uint8_t ddp_tagged_stag_not_associated = 0x02;
inline constexpr uint8_t ddp_tagged_to_wrap = 0x03;
inline constexpr uint8_t ddp_tagged_invalid_ddp_version = 0x04;
// DDP, Untagged Buffer Error
inline constexpr uint8_t ddp_untagged_invalid_qn = 0x01;
inline constexpr uint8_t ddp_untagged_invalid_msn_no_buffer = 0x02;
inline constexpr uint8_t ddp_untagged_invalid_msn_range = 0x03;
inline constexpr uint8_t ddp_untagged_invalid_mo = 0x04;
inline constexpr uint8_t ddp_untagged_message_too_long = 0x05;
inline constexpr uint8_t ddp_untagged_invalid_ddp_version = 0x06;
// LLP / MPA (RFC 5044 §8, RFC 6581 §8)
inline constexpr uint8_t mpa_tcp_connection_lost = 0x01;
inline constexpr uint8_t mpa_crc_error = 0x02;
inline constexpr uint8_t mpa_marker_and_ulpdu_length_disagree = 0x03;
inline constexpr uint8_t mpa_invalid_request_or_reply = 0x04;
inline constexpr uint8_t mpa_local_catastrophic = 0x05;
inline constexpr uint8_t mpa_insufficient_ird = 0x06;
inline constexpr uint8_t mpa_no_matching_rtr = 0x07;
}  // namespace ecode

// One Terminate cause: what an error detector reports and what the Terminate carries.
struct TerminateCode {
    TerminateLayer layer;
    uint8_t etype;
    uint8_t error_code;

    constexpr bool operator==(const TerminateCode&) const = default;
};

// True when (layer, etype, code) is an entry of the RFC 6580 §3 registries
// (RDMAP Local Catastrophic and DDP EType 3, reserved for the LLP, accept any
// Error Code).
bool terminate_code_defined(TerminateCode code);

// "Layer/EType/Error Code" in words, e.g. "DDP/Tagged Buffer/Base or bounds
// violation", "LLP/MPA/CRC error".  Unregistered codes keep the known parts:
// "RDMAP/Remote Operation/undefined code".  Static storage, never fails.
std::string_view terminate_code_name(TerminateCode code);
std::string_view terminate_layer_name(TerminateLayer layer);
std::string_view terminate_etype_name(TerminateLayer layer, uint8_t etype);

}  // namespace iwemu::wire
