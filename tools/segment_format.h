// Text forms of decoded iWARP units for `iwemu decode` (and logs): one
// "key=value" line fragment per MPA frame, DDP header, RDMAP header and
// Terminate code.  Off the data path: these allocate freely.
#pragma once

#include <cstdint>
#include <span>
#include <string>

#include "emulator/wire/ddp_header.h"
#include "emulator/wire/mpa_frame.h"
#include "emulator/wire/terminate_codes.h"
#include "emulator/wire/terminate_message.h"

namespace iwemu::tools {

// printf into a std::string.
std::string strprintf(const char* fmt, ...) __attribute__((format(printf, 1, 2)));

// "request rev=1 M=0 C=1 R=0 S=0 res=0x0 pd_length=9 pd=\"iwemu-req\"" (+ enhanced fields).
std::string format_mpa_frame(const wire::MpaFrame& frame);

// Printable ASCII as "\"text\"", anything else as hex octets.
std::string format_octets(std::span<const uint8_t> octets);

// "T=0 L=1 DV=1 QN=0 MSN=1 MO=0" / "T=1 L=1 DV=1 STag=0x12345678 TO=0x1000".
std::string format_ddp_header(const wire::DdpHeader& header);

// "RV=1 opcode=0x3 (Send)" plus Invalidate STag for opcodes 4 and 6 and the
// opcode's own RDMAP header decoded from `body` (octets after the DDP header,
// possibly only the first ones of a long payload); payload_length = octets
// after the DDP header in this segment.
std::string format_rdmap(const wire::DdpHeader& header, std::span<const uint8_t> body, size_t body_length);

// "layer=2 etype=0 code=0x02 (LLP/MPA/CRC error)"
std::string format_terminate_code(wire::TerminateCode code);

// Decoded Terminate header: code, HdrCt, layout, echoed headers.
std::string format_terminate_message(const wire::TerminateMessage& message);

}  // namespace iwemu::tools
