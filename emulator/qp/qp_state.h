// QP state machine: verbs states (what ibv_modify_qp / ibv_query_qp speak)
// mapped onto the iWARP states of RFC 5040 §6 / the RDMAC verbs as kernel
// siw names them (IDLE, RTS, CLOSING, TERMINATE, ERROR).  Explicit tables,
// no flag soup: every modify goes through verbs_transition(), every data
// path event through iwarp_event().
#pragma once

#include <cstdint>

#include "emulator/verbs_types.h"

namespace iwemu {

enum class IwarpState : uint8_t {
    idle,       // RESET / INIT / RTR: queues exist, no stream
    rts,        // stream attached, data moves
    closing,    // graceful disconnect in progress (verbs SQD)
    terminate,  // a Terminate was sent or received (verbs SQE)
    error,      // flushed; only RESET or destroy leave it
};

const char* to_string(QpState s);
const char* to_string(IwarpState s);

// siw's mapping: RESET, INIT, RTR → IDLE; RTS → RTS; SQD → CLOSING;
// SQE → TERMINATE; ERR → ERROR.
IwarpState iwarp_state_of(QpState s);

// Result of a requested verbs transition.
struct Transition {
    int error = 0;          // 0, or the errno modify returns (EINVAL as siw)
    bool flush = false;     // entering ERR: flush both queues
    bool reset = false;     // entering RESET: empty queues, forget the stream
    bool close = false;     // leaving RTS for SQD: graceful close (FIN)
    bool abort = false;     // entering ERR/RESET with a stream: abortive close
};

// The verbs transition table for an RC QP on this device (cur → next).
// Allowed: RESET→{RESET,INIT}; INIT→{INIT,RTR,RTS}; RTR→{RTR,RTS};
// RTS→{RTS,SQD}; SQD→{SQD,RTS}; SQE→{RTS}; any→{ERR,RESET}.
// INIT→RTS is accepted because an iWARP QP reaches RTS through the
// connection manager, which may run before or after the application's own
// modify calls (librdmacm moves the QP itself on some paths).
Transition verbs_transition(QpState cur, QpState next, bool connected);

// Data path events that move the iWARP state on their own.
enum class IwarpEvent : uint8_t {
    connection_attached,   // CM handed over the socket → RTS
    terminate_sent,        // local error detected → TERMINATE
    terminate_received,    // peer's Terminate → TERMINATE
    llp_closed,            // FIN / RST / socket error → ERROR
    flushed,               // TERMINATE done, queues flushed → ERROR
    graceful_close_done,   // CLOSING finished (FIN both ways) → ERROR (siw: IDLE→ERROR on close)
};

// Next state for (state, event); returns state unchanged when the event is
// not meaningful there (e.g. a late socket error in ERROR).
QpState on_iwarp_event(QpState cur, IwarpEvent ev);

}  // namespace iwemu
