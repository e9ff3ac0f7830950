// One RDMAP message segment as carried in a DDP segment (RFC 5040 §4,
// RFC 5041 §4), and the receive-side checks that need no connection state.
//
// Stateful checks (STag lookup, MSN window, receive buffers, IRD) belong to
// the RX engine; this file answers "is this header well formed for RDMAP",
// with the Terminate code to send when it is not.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>

#include "emulator/wire/ddp_header.h"
#include "emulator/wire/rdmap_opcode.h"
#include "emulator/wire/terminate_codes.h"

namespace iwemu::wire {

struct RdmapSegment {
    DdpHeader ddp;
    RdmapControl rdmap;              // decoded from ddp.rsvdulp0
    std::span<const uint8_t> body;   // everything after the DDP header (RDMAP header + payload)
};

// nullopt when the ULPDU is shorter than its DDP header.
std::optional<RdmapSegment> decode_rdmap_segment(std::span<const uint8_t> ulpdu);

// DDP headers for outgoing RDMAP messages (RFC 5040 §4.1 Fig. 4; DV = RV = 1,
// reserved bits 0).  Tagged: RDMA Write, Read Response.
constexpr DdpHeader rdmap_tagged_header(RdmapOpcode opcode, bool last, uint32_t stag, uint64_t to)
{
    DdpHeader h;
    h.control = DdpControl{true, last, 0, ddp_version};
    h.rsvdulp0 = encode_rdmap_control(opcode);
    h.stag = stag;
    h.to = to;
    return h;
}

// Untagged: QN comes from the opcode (0 Send family / Immediate Data, 1 Read
// Request / Atomic Request, 2 Terminate, 3 Atomic Response); the Invalidate
// STag only travels with opcodes 4 and 6 (RFC 5040 §4.1: 0 otherwise).
constexpr DdpHeader rdmap_untagged_header(RdmapOpcode opcode, bool last, uint32_t msn, uint32_t mo,
                                          uint32_t invalidate_stag = 0)
{
    DdpHeader h;
    h.control = DdpControl{false, last, 0, ddp_version};
    h.rsvdulp0 = encode_rdmap_control(opcode);
    const auto op = static_cast<uint8_t>(opcode);
    h.rsvdulp1 = rdmap_opcode_carries_invalidate_stag(op) ? invalidate_stag : 0;
    const auto info = rdmap_opcode_info(op);
    h.qn = info ? info->qn : 0;
    h.msn = msn;
    h.mo = mo;
    return h;
}

// Receive options that change what is legal.
struct RdmapRxOptions {
    bool rfc7306 = false;  // accept Immediate Data / Atomic opcodes 0x8-0xB (decision 10)
    // DV and RV expected: 1, or 0 on a connection switched to RDMA Consortium
    // behaviour (RFC 5044 Appendix C, CHECKLIST MPA-057 / RDMAP-004).
    uint8_t version = 1;
};

// Checks, first failure wins, in the order Linux siw applies them
// (siw_get_hdr, siw_send_check_ntoh) so both peers report the same code:
//  1. DV ≠ 1 → DDP 1/1/04 (tagged) or 1/2/06 (untagged)     RFC 5041 §7.2
//  2. RV ≠ 1 → RDMAP 0/2/05 Invalid RDMAP version             RFC 5040 §7.2
//  3. opcode unassigned (0xC-0xF), or 0x8-0xB with RFC 7306 off
//            → RDMAP 0/2/06 Unexpected OpCode                 RFC 5040 §7.2, RFC 7306 §1.1
//  4. T bit not the opcode's buffer model → 0/2/06            RFC 5040 §4.1 Fig. 4
//  5. untagged QN not the opcode's queue → DDP 1/2/01 Invalid QN
//                                                            RFC 5040 §3.1, RFC 5041 §7.2
//  6. ULPDU length wrong for the opcode: a fixed-size message (Read Request,
//     Immediate Data, Atomic Request/Response) not exactly its size, or a
//     Terminate shorter than 22 → RDMAP 0/2/FF Unspecified Error (the RFCs
//     name no code: CHECKLIST decision 7, EXT-002).
// ulpdu_length = the MPA ULPDU_Length of this segment.
std::optional<TerminateCode> validate_rdmap_segment(const DdpHeader& ddp, size_t ulpdu_length,
                                                    RdmapRxOptions options = {});

}  // namespace iwemu::wire
