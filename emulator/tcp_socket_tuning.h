// What a QP does to its TCP socket when the connection is handed to it,
// beyond TCP_NODELAY: facts about the peer's place, the congestion control
// a loopback connection runs (Config::tcp_congestion), and how soon a dead
// path counts as a broken connection (Config::liveness_timeout_ms).
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

namespace iwemu {

// The kernel's TCP_CA_NAME_MAX (terminator included): the longest name
// TCP_CONGESTION takes is one less.
inline constexpr size_t tcp_ca_name_max = 16;

// Both ends of the connection on this host: a loopback peer, or one that
// connected to our own address.
bool peer_on_this_host(int fd);

// The congestion control algorithm Config::tcp_congestion asks for on this
// connection, or "" to leave the socket as the system made it.
//   setting  "system", "auto" or an algorithm's name (Config validates it)
//   current  the socket's algorithm now (TCP_CONGESTION)
std::string congestion_control_for(std::string_view setting, std::string_view current, bool same_host);

// Applies congestion_control_for() to fd.  A failure (algorithm not built
// into this kernel, or not in tcp_allowed_congestion_control) leaves the
// system's choice in place: logged as a warning when the user named the
// algorithm, at debug level for auto.  Returns the algorithm fd runs.
std::string apply_congestion_control(int fd, std::string_view setting, bool same_host);

// Liveness (Config::liveness_timeout_ms; 0 leaves the socket alone): data
// left unacknowledged for timeout_ms (TCP_USER_TIMEOUT) or an idle peer that
// stops answering keepalive probes within about timeout_ms aborts the
// connection with ETIMEDOUT, which the QP reports as any broken connection.
void apply_liveness(int fd, uint32_t timeout_ms);

}  // namespace iwemu
