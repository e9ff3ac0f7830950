// The per-connection MPA startup state machine (RFC 5044 §7.1.2, RFC 6581
// §9, seed-002 Rtr frame), as an enum and an explicit transition table.
//
//  active:   tcp_connecting -> sending_request -> awaiting_reply
//              -> [sending_rtr_frame] -> handing_off -> established -> closed
//              awaiting_reply -> sending_terminate -> closed   (no RTR / IRD)
//              sending_request | awaiting_reply -> awaiting_retry
//              -> tcp_connecting   (reset before any Reply octet; a reconnect
//              refused: tcp_connecting -> awaiting_retry)
//  passive:  awaiting_request -> awaiting_ulp -> sending_reply
//              -> [awaiting_rtr_frame] -> handing_off -> established -> closed
//              awaiting_request | awaiting_ulp -> sending_reject -> closed
//  draft-03 Start Key (start_key_startup.h):
//  active:   tcp_connecting -> sending_start_key -> awaiting_start_key
//              -> handing_off;  either -> awaiting_retry (reset, no key octet)
//            awaiting_reply -> awaiting_start_key (a Start Key answered our Request)
//  passive:  awaiting_request (a Start Key) -> awaiting_ulp
//              -> answering_start_key -> handing_off
//  any state -> closed (error, timeout, destroy)
#pragma once

#include <cstdint>
#include <string_view>

namespace iwemu::cm {

enum class StartupState : uint8_t {
    tcp_connecting,      // active: non-blocking connect() in progress
    sending_request,     // active: writing the MPA Request
    awaiting_reply,      // active: reading the MPA Reply (exact lengths)
    sending_rtr_frame,   // active, seed-002: writing the Rtr frame
    sending_terminate,   // active: writing Terminate LLP/MPA/0x06 or 0x07, then close
    awaiting_retry,      // active: reset before any Reply octet; no socket, reconnecting soon
    awaiting_request,    // passive: reading the MPA Request (exact lengths)
    awaiting_ulp,        // passive: connect_request delivered, accept()/reject() pending
    sending_reply,       // passive: writing the accepting Reply
    awaiting_rtr_frame,  // passive, seed-002: reading the Rtr frame
    sending_reject,      // passive: writing a Reply with R=1, then close
    sending_start_key,   // active, draft-03: writing our Start Key (we are its "Passive" side)
    awaiting_start_key,  // active, draft-03: reading the Responder's Start Key
    answering_start_key, // passive, draft-03: writing our Start Key after accept()
    handing_off,         // out of the CM's epoll, Endpoint::attach running
    established,         // the QP owns the socket
    closed,
};

inline constexpr size_t startup_state_count = static_cast<size_t>(StartupState::closed) + 1;

std::string_view to_string(StartupState state);

// True if `from -> to` is a legal step.
bool startup_transition_allowed(StartupState from, StartupState to);

// States in which the CM still holds the socket in its epoll set.
constexpr bool cm_owns_socket(StartupState s)
{
    return s != StartupState::handing_off && s != StartupState::established &&
           s != StartupState::closed;  // awaiting_retry: the next socket will be (fd -1 meanwhile)
}

}  // namespace iwemu::cm
