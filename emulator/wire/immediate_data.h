// The RFC 7306 Immediate Data message as a whole ULPDU, and where the verbs
// 32-bit immediate value sits in its 8-octet field (WIRE.md §8.5, VECTORS V-X1).
//
// RFC 7306 §6.2: opcodes 1000b (Immediate Data) and 1001b (Immediate Data
// with Solicited Event) travel untagged on QN 0, the Send queue: they share
// the Send MSN sequence and consume one untagged (receive) buffer at the Data
// Sink (§6.3: ordering and completion as for a Send, RFC 5040 §5.5).  The
// message is one DDP segment (L = 1, MO = 0) carrying exactly 8 octets of
// Immediate Data and nothing else; the receiver rejects any other length
// (§6.3, EXT-002; validate_rdmap_segment() does it).
//
// Verbs carries a 4-octet imm_data (__be32, network order in memory).  It
// goes verbatim into octets 0..3 of the Immediate Data field; octets 4..7 are
// sent as 0 and ignored on receipt.  The field is opaque to RDMAP (§6.2), so
// this is our ULP convention, the way InfiniBand puts its 4-octet ImmDt right
// after the transport header.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>

#include "emulator/wire/ddp_header.h"
#include "emulator/wire/rdmap_ext.h"

namespace iwemu::wire {

// DDP untagged header (18) + Immediate Data (8): ULPDU_Length is always 26.
inline constexpr size_t immediate_data_ulpdu_size = ddp_untagged_header_size + immediate_data_size;
static_assert(immediate_data_ulpdu_size == 26);

// Octets of the 8-octet field that carry the verbs 32-bit immediate value.
inline constexpr size_t immediate_data_imm32_offset = 0;

struct ImmediateDataMessage {
    bool solicited_event = false;  // opcode 1001b (RFC 7306 §6.2)
    uint32_t msn = 1;              // QN 0 MSN: the Send sequence
    ImmediateData data;

    constexpr bool operator==(const ImmediateDataMessage&) const = default;
};

// The verbs imm_data, given in host order (be32toh of ibv_send_wr::imm_data),
// as the 8-octet field: its 4 network-order octets first, then zeros.
ImmediateData immediate_data_from_imm32(uint32_t imm);
// Inverse: octets 0..3 as a host-order value (htobe32 gives ibv_wc::imm_data).
uint32_t imm32_from_immediate_data(const ImmediateData& data);

// Encode the whole 26-octet ULPDU (DDP control 0x41, RDMAP control 0x48 or
// 0x49, Invalidate STag field 0, QN 0, MO 0).  Returns 26, or 0 if out is
// too small.
size_t encode_immediate_data_message(const ImmediateDataMessage& m, std::span<uint8_t> out);

// Decode a ULPDU that must be exactly an Immediate Data message: untagged,
// L = 1, opcode 0x8 or 0x9, QN 0, MO 0, 26 octets.  nullopt otherwise (the
// RX engine reports the precise Terminate code through validate_rdmap_segment;
// this is for tools and tests that want the message or nothing).
std::optional<ImmediateDataMessage> decode_immediate_data_message(std::span<const uint8_t> ulpdu);

}  // namespace iwemu::wire
