// RDMAP Terminate message, RFC 5040 §4.8 (Fig. 9, 10) and App. A.6;
// WIRE.md §8.4 and §9.4.
//
// The Terminate is an untagged message on QN 2.  After its DDP header comes
// the 32-bit Terminate control word
//     Layer(4) EType(4) | Error Code(8) | M D R (3) Reserved(13)
// then, if D=1, the DDP Segment Length (16) and the terminated DDP header
// (14 or 18 octets, by that header's own T bit), then, if R=1, the terminated
// RDMA Read Request header (28).
//
// Linux siw (iwarp.h, struct iwarp_terminate) declares the control word as C
// bitfields; on little-endian hosts that puts Layer in the LOW nibble of the
// first octet and M/D/R at 0x01/0x02/0x04 of the third.  iwemu never sends
// that layout but recognises it on receive (DESIGN "Decisions").
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>

#include "emulator/wire/ddp_header.h"
#include "emulator/wire/read_request.h"
#include "emulator/wire/terminate_codes.h"

namespace iwemu::wire {

// HdrCt bits, third octet of the control word (RFC 5040 §4.8).
inline constexpr uint8_t terminate_hdrct_m = 0x80;  // DDP Segment Length valid
inline constexpr uint8_t terminate_hdrct_d = 0x40;  // DDP Segment Length + DDP header present
inline constexpr uint8_t terminate_hdrct_r = 0x20;  // RDMA (Read Request) header present

// ULPDU sizes: 18 DDP + 4 control + (2 + 18) + 28.
inline constexpr size_t terminate_ulpdu_min_size = ddp_untagged_header_size + terminate_control_size;
inline constexpr size_t terminate_ulpdu_max_size =
    terminate_ulpdu_min_size + 2 + ddp_untagged_header_size + rdma_read_request_header_size;

struct TerminateControl {
    TerminateCode code{TerminateLayer::rdmap, 0, 0};
    bool m = false;  // DDP Segment Length is valid
    bool d = false;  // DDP Segment Length and terminated DDP header present
    bool r = false;  // terminated RDMA header present
    uint16_t reserved = 0;  // the 13 reserved bits as received

    constexpr bool operator==(const TerminateControl&) const = default;
};

enum class TerminateLayout : uint8_t {
    rfc5040,             // as RFC 5040 §4.8 draws it (what iwemu sends)
    linux_siw_bitfield,  // Linux siw's little-endian bitfield layout (tolerated on receive)
};

// Encode the 4-octet control word.  linux_siw_bitfield exists for tests and
// fault injection (to play a siw peer); iwemu's own Terminates use rfc5040.
void encode_terminate_control(const TerminateControl& control, std::span<uint8_t, terminate_control_size> out,
                              TerminateLayout layout = TerminateLayout::rfc5040);
TerminateControl decode_terminate_control(std::span<const uint8_t, terminate_control_size> in,
                                          TerminateLayout layout);

enum class TerminateDecodeStatus : uint8_t {
    ok,
    too_short,       // fewer than 4 octets, or shorter than the headers its HdrCt announces
    inconsistent,    // neither layout gives a registered code with zero reserved bits
                     // and headers that fit; fields are still decoded as rfc5040
};

struct TerminateMessage {
    TerminateDecodeStatus status = TerminateDecodeStatus::too_short;
    TerminateLayout layout = TerminateLayout::rfc5040;
    bool layout_ambiguous = false;  // both layouts fit (flags octet 0): rfc5040 chosen
    TerminateControl control;
    uint16_t ddp_segment_length = 0;                  // meaningful when control.d (valid if control.m)
    std::optional<DdpHeader> terminated_ddp_header;   // when control.d
    std::span<const uint8_t> terminated_ddp_octets;   // its raw 14/18 octets
    std::optional<RdmaReadRequestHeader> terminated_rdma_header;  // when control.r
    size_t size = 0;                                  // octets the Terminate header occupies
};

// body = the ULPDU octets after the Terminate's own 18-octet DDP header.
TerminateMessage decode_terminate(std::span<const uint8_t> body);

// What a Terminate carries for a cause (RFC 5040 §4.8 Fig. 10, §7.1;
// WIRE.md §9.4): D for DDP errors and RDMAP remote errors when the offending
// segment is known; R only for RDMAP Remote Protection on a Read Request;
// nothing for local catastrophic and LLP errors.
struct TerminateHeaders {
    bool ddp = false;
    bool rdma = false;
};
TerminateHeaders terminate_headers_for(TerminateCode code, std::optional<uint8_t> offending_opcode);

// One detected error and the incoming segment that caused it.
struct TerminateCause {
    TerminateCode code;
    // The offending DDP segment from its DDP header on: at least the DDP
    // header, plus the 28-octet Read Request header for a Read Request.
    // Empty when the error is not tied to an incoming segment (RFC 5040 §7.1
    // case 1): the Terminate then carries no headers.
    std::span<const uint8_t> offending_ulpdu;
    // ULPDU_Length of the offending segment when known: sets M.
    std::optional<uint16_t> ddp_segment_length;
};

// Build the complete Terminate ULPDU (its untagged DDP header on QN 2 with
// the given MSN, L=1, then the Terminate header) into out.  Returns the
// ULPDU length, 0 if out is smaller than terminate_ulpdu_max_size would need.
size_t build_terminate_ulpdu(const TerminateCause& cause, uint32_t msn, std::span<uint8_t> out);

}  // namespace iwemu::wire
