#include "emulator/qp/qp_state.h"

#include <cerrno>

namespace iwemu {

const char* to_string(QpState s)
{
    switch (s) {
    case QpState::reset: return "RESET";
    case QpState::init: return "INIT";
    case QpState::rtr: return "RTR";
    case QpState::rts: return "RTS";
    case QpState::sqd: return "SQD";
    case QpState::sqe: return "SQE";
    case QpState::err: return "ERR";
    }
    return "?";
}

const char* to_string(IwarpState s)
{
    switch (s) {
    case IwarpState::idle: return "IDLE";
    case IwarpState::rts: return "RTS";
    case IwarpState::closing: return "CLOSING";
    case IwarpState::terminate: return "TERMINATE";
    case IwarpState::error: return "ERROR";
    }
    return "?";
}

IwarpState iwarp_state_of(QpState s)
{
    switch (s) {
    case QpState::reset:
    case QpState::init:
    case QpState::rtr: return IwarpState::idle;
    case QpState::rts: return IwarpState::rts;
    case QpState::sqd: return IwarpState::closing;
    case QpState::sqe: return IwarpState::terminate;
    case QpState::err: return IwarpState::error;
    }
    return IwarpState::error;
}

namespace {

constexpr int kStates = 7;
// allowed[cur][next]
constexpr bool allowed[kStates][kStates] = {
    //            RESET  INIT   RTR    RTS    SQD    SQE    ERR
    /* RESET */ {true,  true,  false, false, false, false, true},
    /* INIT  */ {true,  true,  true,  true,  false, false, true},
    /* RTR   */ {true,  false, true,  true,  false, false, true},
    /* RTS   */ {true,  false, false, true,  true,  false, true},
    /* SQD   */ {true,  false, false, true,  true,  false, true},
    /* SQE   */ {true,  false, false, true,  false, false, true},
    /* ERR   */ {true,  false, false, false, false, false, true},
};

}  // namespace

Transition verbs_transition(QpState cur, QpState next, bool connected)
{
    Transition t;
    const auto c = static_cast<uint32_t>(cur), n = static_cast<uint32_t>(next);
    if (c >= kStates || n >= kStates || !allowed[c][n]) {
        t.error = EINVAL;
        return t;
    }
    if (next == QpState::err && cur != QpState::err) {
        t.flush = true;
        t.abort = connected;
    }
    if (next == QpState::reset) {
        t.reset = true;
        t.abort = connected;
    }
    if (cur == QpState::rts && next == QpState::sqd)
        t.close = connected;
    return t;
}

QpState on_iwarp_event(QpState cur, IwarpEvent ev)
{
    switch (ev) {
    case IwarpEvent::connection_attached:
        return (cur == QpState::init || cur == QpState::rtr || cur == QpState::rts) ? QpState::rts : cur;
    case IwarpEvent::terminate_sent:
    case IwarpEvent::terminate_received:
        return (cur == QpState::rts || cur == QpState::sqd) ? QpState::sqe : cur;
    case IwarpEvent::llp_closed:
    case IwarpEvent::flushed:
    case IwarpEvent::graceful_close_done:
        return cur == QpState::reset ? cur : QpState::err;
    }
    return cur;
}

}  // namespace iwemu
