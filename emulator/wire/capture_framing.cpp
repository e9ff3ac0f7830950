#include "emulator/wire/capture_framing.h"

#include <cstring>

#include "emulator/wire/mpa_frame.h"
#include "emulator/wire/network_order.h"
#include "emulator/wire/rdmap_opcode.h"

namespace iwemu::wire {

namespace {

// "MPA ID R": the common prefix of the Request, Reply and Rtr keys.
bool opens_mpa_frame(std::span<const uint8_t> head)
{
    return head.size() >= 8 && std::memcmp(head.data(), mpa_request_key.data(), 8) == 0;
}

size_t startup_frame_length(std::span<const uint8_t> head)
{
    if (head.size() < mpa_frame_header_size) return 0;
    return mpa_frame_header_size + be::load16(head.data() + 18);  // PD_Length (§7.1.1)
}

size_t fpdu_length(std::span<const uint8_t> head)
{
    if (head.size() < 2) return 0;
    const size_t ulpdu = be::load16(head.data());
    return ((2 + ulpdu + 3) & ~size_t{3}) + 4;  // length, ULPDU, PAD, CRC (§4.1)
}

}  // namespace

size_t CaptureFraming::unit_length(std::span<const uint8_t> head) const
{
    if (head.empty()) return 0;
    switch (state_) {
    case State::startup:
        if (head.size() < 8) return 0;
        return opens_mpa_frame(head) ? startup_frame_length(head) : head.size();
    case State::after_startup:
        // seed-002 Rtr frame after the Request (an FPDU of 0x4D50 octets
        // cannot follow a startup frame: it exceeds every MULPDU).
        if (head.size() < 8) return 0;
        return opens_mpa_frame(head) ? startup_frame_length(head) : fpdu_length(head);
    case State::fpdus:
        return fpdu_length(head);
    case State::pass_through:
        return head.size();
    }
    return head.size();
}

void CaptureFraming::unit_taken(std::span<const uint8_t> unit)
{
    switch (state_) {
    case State::startup:
        if (!opens_mpa_frame(unit)) {
            state_ = State::pass_through;
            return;
        }
        marker_flag_ = unit.size() > 16 && (unit[16] & mpa_flag::m);
        state_ = State::after_startup;
        return;
    case State::after_startup:
        state_ = State::fpdus;
        return;
    default:
        return;
    }
}

size_t fpdu_header_length(std::span<const uint8_t> fpdu)
{
    if (fpdu.size() < 4) return fpdu.size();
    const bool tagged = fpdu[2] & 0x80;  // DDP T flag (RFC 5041 §4.2)
    const auto op = static_cast<RdmapOpcode>(fpdu[3] & 0x0F);  // RDMAP opcode (RFC 5040 §4.2)
    size_t keep = fpdu.size();
    switch (op) {
    case RdmapOpcode::rdma_write:
    case RdmapOpcode::rdma_read_response:
        keep = 2 + 14;
        break;
    case RdmapOpcode::send:
    case RdmapOpcode::send_with_invalidate:
    case RdmapOpcode::send_with_se:
    case RdmapOpcode::send_with_se_and_invalidate:
        keep = 2 + 18;
        break;
    default:
        break;
    }
    if (tagged != (keep == 2 + 14) && keep != fpdu.size()) keep = fpdu.size();  // T flag contradicts the opcode: keep it all
    return keep < fpdu.size() ? keep : fpdu.size();
}

}  // namespace iwemu::wire
