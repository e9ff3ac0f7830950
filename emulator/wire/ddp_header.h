// DDP segment header codec, RFC 5041 §4 (WIRE.md §5, §7).
//
// Every DDP segment (= MPA ULPDU) starts with the DDP control octet, then the
// tagged header (T=1, 14 octets: RsvdULP(8) STag TO) or the untagged header
// (T=0, 18 octets: RsvdULP(40) QN MSN MO).  RsvdULP belongs to the ULP: RDMAP
// puts its control octet in the first RsvdULP octet (RFC 5040 §4.1) and, for
// Send with Invalidate, the Invalidate STag in untagged RsvdULP[8:39].
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>

#include "emulator/wire/fpdu.h"  // ddp_*_header_size, ddp_version, ddp_header_size(): shared with the MPA receiver
#include "emulator/wire/terminate_codes.h"

namespace iwemu::wire {

// RFC 5041 §4.1 control field masks (octet 0 of the ULPDU).  The header
// sizes (§4.2: 14, §4.3: 18), DV = 1 and ddp_header_size(control octet) are
// declared in fpdu.h, where the MPA receiver needs them to find the header.
inline constexpr uint8_t ddp_control_tagged = ddp_control_t;  // T
inline constexpr uint8_t ddp_control_last = 0x40;             // L
inline constexpr uint8_t ddp_control_rsvd = 0x3C;             // Rsvd, sent 0, not checked
inline constexpr uint8_t ddp_control_dv = ddp_control_dv_mask;  // DDP Version
static_assert(ddp_control_tagged == 0x80 && ddp_control_dv == 0x03 && ddp_version == 1);
static_assert(ddp_tagged_header_size == 14 && ddp_untagged_header_size == 18);

// RFC 5041 §4.1: the decoded control octet.
struct DdpControl {
    bool tagged = false;  // T
    bool last = false;    // L
    uint8_t rsvd = 0;     // Rsvd (4 bits)
    uint8_t dv = ddp_version;

    constexpr bool operator==(const DdpControl&) const = default;
};

constexpr DdpControl decode_ddp_control(uint8_t octet)
{
    return DdpControl{(octet & ddp_control_tagged) != 0, (octet & ddp_control_last) != 0,
                      static_cast<uint8_t>((octet & ddp_control_rsvd) >> 2),
                      static_cast<uint8_t>(octet & ddp_control_dv)};
}

constexpr uint8_t encode_ddp_control(const DdpControl& c)
{
    return static_cast<uint8_t>((c.tagged ? ddp_control_tagged : 0) | (c.last ? ddp_control_last : 0) |
                                ((c.rsvd << 2) & ddp_control_rsvd) | (c.dv & ddp_control_dv));
}

// A decoded DDP header of either model.  Fields of the other model are zero.
struct DdpHeader {
    DdpControl control;
    // RsvdULP[0:7]: the first ULP octet, present in both models (RDMAP control).
    uint8_t rsvdulp0 = 0;
    // Untagged only: RsvdULP[8:39] (RDMAP: Invalidate STag, RFC 5040 §4.1).
    uint32_t rsvdulp1 = 0;
    // Tagged buffer model, RFC 5041 §4.2.
    uint32_t stag = 0;
    uint64_t to = 0;  // Tagged Offset
    // Untagged buffer model, RFC 5041 §4.3.
    uint32_t qn = 0;   // Queue Number
    uint32_t msn = 0;  // Message Sequence Number
    uint32_t mo = 0;   // Message Offset

    constexpr size_t size() const { return control.tagged ? ddp_tagged_header_size : ddp_untagged_header_size; }
    constexpr bool operator==(const DdpHeader&) const = default;
};

// Decode the DDP header at the start of a ULPDU.  nullopt: the span is shorter
// than the header its own T bit announces (or empty).  No field is validated
// here: see check_ddp_version().
std::optional<DdpHeader> decode_ddp_header(std::span<const uint8_t> ulpdu);

// Encode into out; returns the octets written (14 or 18), 0 if out is too small.
size_t encode_ddp_header(const DdpHeader& header, std::span<uint8_t> out);

// RFC 5041 §4.1, §7.2: DV ≠ 1 is "Invalid DDP version", reported in the
// error type of the segment's own model: 1/1/04 tagged, 1/2/06 untagged.
constexpr std::optional<TerminateCode> check_ddp_version(const DdpControl& control,
                                                        uint8_t expected = ddp_version)
{
    if (control.dv == expected)
        return std::nullopt;
    if (control.tagged)
        return TerminateCode{TerminateLayer::ddp, etype::ddp_tagged_buffer, ecode::ddp_tagged_invalid_ddp_version};
    return TerminateCode{TerminateLayer::ddp, etype::ddp_untagged_buffer, ecode::ddp_untagged_invalid_ddp_version};
}

}  // namespace iwemu::wire
