// Unit boundaries of one direction of an MPA stream, for a synthesized
// capture: the capture cuts its TCP segments where startup frames
// (RFC 5044 §7.1) and FPDUs (§4) begin, because Wireshark's MPA dissector
// only finds an FPDU whose first 8 octets open a segment (ORACLE.md §2).
// Pure.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>

namespace iwemu::wire {

class CaptureFraming {
public:
    // Octets of the unit that opens `head` (which starts at a unit
    // boundary); 0 while `head` is too short to tell.  In pass-through mode
    // (markers, or a stream that is not MPA) every octet is a unit of its own
    // (returns head.size()).
    size_t unit_length(std::span<const uint8_t> head) const;
    // The unit just measured by unit_length() has been taken.
    void unit_taken(std::span<const uint8_t> unit);
    // Markers move FPDU boundaries away from ULPDU_Length: stop framing.
    void pass_through() { state_ = State::pass_through; }
    bool in_startup() const { return state_ == State::startup; }
    bool passing_through() const { return state_ == State::pass_through; }
    // M bit of the startup frame seen in this direction (RFC 5044 §7.1.1).
    bool marker_flag() const { return marker_flag_; }

private:
    enum class State : uint8_t { startup, after_startup, fpdus, pass_through };
    State state_ = State::startup;
    bool marker_flag_ = false;
};

// Octets of an FPDU (MPA ULPDU_Length, DDP and RDMAP headers) a payload
// elision keeps before the payload: RFC 5041 §4.2/4.3 (tagged 14, untagged
// 18 octets), RFC 5040 §4.  Returns fpdu.size() for messages without bulk
// payload (Read Request, Terminate, atomics, Immediate Data): those are
// always kept whole.
size_t fpdu_header_length(std::span<const uint8_t> fpdu);

}  // namespace iwemu::wire
