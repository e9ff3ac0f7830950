// RDMAP control octet and opcodes: RFC 5040 §4.1 (Fig. 4), RFC 7306 §4.1/§10,
// IANA registry RFC 6580 §3.4.  WIRE.md §5 table.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string_view>

namespace iwemu::wire {

// RFC 5040 §4.1: RDMAP control field = RsvdULP[0:7] (ULPDU octet 1).
inline constexpr uint8_t rdmap_control_rv = 0xC0;      // RDMA Version (2 bits)
inline constexpr uint8_t rdmap_control_rsvd = 0x30;    // Rsv, sent 0, ignored
inline constexpr uint8_t rdmap_control_opcode = 0x0F;  // OpCode

inline constexpr uint8_t rdmap_version = 1;  // RV = 01b (0 = RDMA Consortium)

enum class RdmapOpcode : uint8_t {
    rdma_write = 0x0,
    rdma_read_request = 0x1,
    rdma_read_response = 0x2,
    send = 0x3,
    send_with_invalidate = 0x4,
    send_with_se = 0x5,
    send_with_se_and_invalidate = 0x6,
    terminate = 0x7,
    // RFC 7306
    immediate_data = 0x8,
    immediate_data_with_se = 0x9,
    atomic_request = 0xA,
    atomic_response = 0xB,
};

// RFC 5040 §3.1 / RFC 7306 §4.1: untagged queue numbers used by RDMAP.
inline constexpr uint32_t rdmap_qn_send = 0;             // Send family, Immediate Data
inline constexpr uint32_t rdmap_qn_read_request = 1;     // Read Request, Atomic Request
inline constexpr uint32_t rdmap_qn_terminate = 2;        // Terminate
inline constexpr uint32_t rdmap_qn_atomic_response = 3;  // Atomic Response (RFC 7306)

// RDMAP header sizes after the DDP header.
inline constexpr size_t rdma_read_request_header_size = 28;  // RFC 5040 §4.4
inline constexpr size_t terminate_control_size = 4;          // RFC 5040 §4.8
inline constexpr size_t immediate_data_size = 8;             // RFC 7306 §6.2
inline constexpr size_t atomic_request_header_size = 52;     // RFC 7306 §5.2.1
inline constexpr size_t atomic_response_header_size = 12;    // RFC 7306 §5.2.2 (not 32, decision 12)

// Static facts about one opcode (the WIRE.md §5 table as data).
struct RdmapOpcodeInfo {
    std::string_view name;
    bool tagged;            // DDP buffer model the opcode must use
    uint32_t qn;            // untagged queue (meaningless when tagged)
    size_t rdmap_header;    // RDMAP header octets after the DDP header (minimum for Terminate)
    bool fixed_length;      // ULPDU is exactly DDP header + rdmap_header (no ULP payload)
    bool rfc7306;           // defined by RFC 7306, accepted only when the extensions are on
};

// nullopt for 0xC–0xF (unassigned / experimental, RFC 6580 §3.4).
constexpr std::optional<RdmapOpcodeInfo> rdmap_opcode_info(uint8_t opcode)
{
    switch (opcode) {
    case 0x0: return RdmapOpcodeInfo{"RDMA Write", true, 0, 0, false, false};
    case 0x1: return RdmapOpcodeInfo{"RDMA Read Request", false, rdmap_qn_read_request,
                                     rdma_read_request_header_size, true, false};
    case 0x2: return RdmapOpcodeInfo{"RDMA Read Response", true, 0, 0, false, false};
    case 0x3: return RdmapOpcodeInfo{"Send", false, rdmap_qn_send, 0, false, false};
    case 0x4: return RdmapOpcodeInfo{"Send with Invalidate", false, rdmap_qn_send, 0, false, false};
    case 0x5: return RdmapOpcodeInfo{"Send with Solicited Event", false, rdmap_qn_send, 0, false, false};
    case 0x6: return RdmapOpcodeInfo{"Send with Solicited Event and Invalidate", false, rdmap_qn_send, 0,
                                     false, false};
    case 0x7: return RdmapOpcodeInfo{"Terminate", false, rdmap_qn_terminate, terminate_control_size, false,
                                     false};
    case 0x8: return RdmapOpcodeInfo{"Immediate Data", false, rdmap_qn_send, immediate_data_size, true, true};
    case 0x9: return RdmapOpcodeInfo{"Immediate Data with Solicited Event", false, rdmap_qn_send,
                                     immediate_data_size, true, true};
    case 0xA: return RdmapOpcodeInfo{"Atomic Request", false, rdmap_qn_read_request,
                                     atomic_request_header_size, true, true};
    case 0xB: return RdmapOpcodeInfo{"Atomic Response", false, rdmap_qn_atomic_response,
                                     atomic_response_header_size, true, true};
    default: return std::nullopt;
    }
}

constexpr std::string_view rdmap_opcode_name(uint8_t opcode)
{
    if (auto info = rdmap_opcode_info(opcode))
        return info->name;
    return opcode == 0xF ? "Reserved for experiments" : "Unassigned";
}

// RFC 5040 §4.1: the decoded control octet.
struct RdmapControl {
    uint8_t rv = rdmap_version;
    uint8_t rsvd = 0;
    uint8_t opcode = 0;

    constexpr bool operator==(const RdmapControl&) const = default;
};

constexpr RdmapControl decode_rdmap_control(uint8_t octet)
{
    return RdmapControl{static_cast<uint8_t>(octet >> 6), static_cast<uint8_t>((octet & rdmap_control_rsvd) >> 4),
                        static_cast<uint8_t>(octet & rdmap_control_opcode)};
}

constexpr uint8_t encode_rdmap_control(const RdmapControl& c)
{
    return static_cast<uint8_t>((c.rv << 6) | ((c.rsvd << 4) & rdmap_control_rsvd) | (c.opcode & rdmap_control_opcode));
}

constexpr uint8_t encode_rdmap_control(RdmapOpcode op)
{
    return encode_rdmap_control(RdmapControl{rdmap_version, 0, static_cast<uint8_t>(op)});
}

// Opcodes 4 and 6 carry the Invalidate STag in RsvdULP[8:39] (RFC 5040 §4.1).
constexpr bool rdmap_opcode_carries_invalidate_stag(uint8_t opcode)
{
    return opcode == 0x4 || opcode == 0x6;
}

// RFC 7306 §6.2: Immediate Data (1000b) or Immediate Data with SE (1001b).
constexpr bool rdmap_opcode_is_immediate_data(uint8_t opcode)
{
    return opcode == static_cast<uint8_t>(RdmapOpcode::immediate_data) ||
           opcode == static_cast<uint8_t>(RdmapOpcode::immediate_data_with_se);
}

}  // namespace iwemu::wire
