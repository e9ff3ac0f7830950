#include "emulator/cm/startup_state.h"

#include <array>

namespace iwemu::cm {

namespace {

using S = StartupState;

struct Step {
    S from;
    S to;
};

// Every legal step besides "-> closed", which every state but closed may take.
constexpr Step steps[] = {
    {S::tcp_connecting, S::sending_request},
    {S::sending_request, S::awaiting_reply},
    {S::awaiting_reply, S::sending_rtr_frame},
    {S::awaiting_reply, S::sending_terminate},
    {S::awaiting_reply, S::handing_off},
    {S::sending_request, S::awaiting_retry},
    {S::awaiting_reply, S::awaiting_retry},
    {S::awaiting_retry, S::tcp_connecting},
    {S::tcp_connecting, S::awaiting_retry},  // a reconnect refused: the server is not listening again yet
    {S::sending_rtr_frame, S::handing_off},
    {S::awaiting_request, S::awaiting_ulp},
    {S::awaiting_request, S::sending_reject},
    {S::awaiting_ulp, S::sending_reply},
    {S::awaiting_ulp, S::sending_reject},
    {S::sending_reply, S::awaiting_rtr_frame},
    {S::sending_reply, S::handing_off},
    {S::awaiting_rtr_frame, S::handing_off},
    {S::tcp_connecting, S::sending_start_key},
    {S::sending_start_key, S::awaiting_start_key},
    {S::sending_start_key, S::awaiting_retry},
    {S::awaiting_start_key, S::awaiting_retry},
    {S::awaiting_start_key, S::handing_off},
    {S::awaiting_reply, S::awaiting_start_key},  // a start-key-mode Responder answered our Request
    {S::awaiting_ulp, S::answering_start_key},
    {S::answering_start_key, S::handing_off},
    {S::handing_off, S::established},
};

constexpr auto build_table()
{
    std::array<std::array<bool, startup_state_count>, startup_state_count> t{};
    for (const Step& step : steps)
        t[static_cast<size_t>(step.from)][static_cast<size_t>(step.to)] = true;
    for (size_t from = 0; from + 1 < startup_state_count; ++from)
        t[from][static_cast<size_t>(S::closed)] = true;
    return t;
}

constexpr auto table = build_table();

}  // namespace

bool startup_transition_allowed(StartupState from, StartupState to)
{
    return table[static_cast<size_t>(from)][static_cast<size_t>(to)];
}

std::string_view to_string(StartupState state)
{
    switch (state) {
    case S::tcp_connecting: return "tcp_connecting";
    case S::sending_request: return "sending_request";
    case S::awaiting_reply: return "awaiting_reply";
    case S::sending_rtr_frame: return "sending_rtr_frame";
    case S::sending_terminate: return "sending_terminate";
    case S::awaiting_retry: return "awaiting_retry";
    case S::awaiting_request: return "awaiting_request";
    case S::awaiting_ulp: return "awaiting_ulp";
    case S::sending_reply: return "sending_reply";
    case S::awaiting_rtr_frame: return "awaiting_rtr_frame";
    case S::sending_reject: return "sending_reject";
    case S::sending_start_key: return "sending_start_key";
    case S::awaiting_start_key: return "awaiting_start_key";
    case S::answering_start_key: return "answering_start_key";
    case S::handing_off: return "handing_off";
    case S::established: return "established";
    case S::closed: return "closed";
    }
    return "?";
}

}  // namespace iwemu::cm
