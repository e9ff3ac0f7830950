#include "emulator/tcp_socket_tuning.h"

#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "emulator/base/log.h"

namespace iwemu {

bool peer_on_this_host(int fd)
{
    sockaddr_storage local{}, peer{};
    socklen_t llen = sizeof local, plen = sizeof peer;
    if (getsockname(fd, reinterpret_cast<sockaddr*>(&local), &llen) != 0 ||
        getpeername(fd, reinterpret_cast<sockaddr*>(&peer), &plen) != 0 || local.ss_family != peer.ss_family)
        return false;
    if (peer.ss_family == AF_INET) {
        const in_addr l = reinterpret_cast<const sockaddr_in&>(local).sin_addr;
        const in_addr p = reinterpret_cast<const sockaddr_in&>(peer).sin_addr;
        return (ntohl(p.s_addr) >> 24) == 127 || l.s_addr == p.s_addr;
    }
    if (peer.ss_family == AF_INET6) {
        const in6_addr& l = reinterpret_cast<const sockaddr_in6&>(local).sin6_addr;
        const in6_addr& p = reinterpret_cast<const sockaddr_in6&>(peer).sin6_addr;
        if (IN6_IS_ADDR_LOOPBACK(&p) || std::memcmp(&l, &p, sizeof l) == 0) return true;
        return IN6_IS_ADDR_V4MAPPED(&p) && p.s6_addr[12] == 127;
    }
    return false;
}

// auto: a connection within this host has no path to share and nothing to
// probe, but BBR (a common system default) paces every socket from an
// hrtimer at its bandwidth estimate, which on loopback holds a bursty sender
// back (docs/performance.md, fourteenth session).  Cubic sends what the
// window allows.  Between hosts the system's choice stands.
std::string congestion_control_for(std::string_view setting, std::string_view current, bool same_host)
{
    if (setting == "system") return {};
    if (setting == "auto") return same_host && current.substr(0, 3) == "bbr" ? "cubic" : "";
    return current == setting ? "" : std::string(setting);
}

std::string apply_congestion_control(int fd, std::string_view setting, bool same_host)
{
    char now[tcp_ca_name_max] = {};
    socklen_t len = sizeof now;
    if (getsockopt(fd, IPPROTO_TCP, TCP_CONGESTION, now, &len) != 0) return {};
    const std::string current(now, strnlen(now, sizeof now));
    const std::string want = congestion_control_for(setting, current, same_host);
    if (want.empty()) return current;
    if (setsockopt(fd, IPPROTO_TCP, TCP_CONGESTION, want.data(), static_cast<socklen_t>(want.size())) != 0) {
        const int e = errno;
        if (setting == "auto")
            IWEMU_LOG(debug, "fd %d: congestion control %s not available (%s), keeping %s", fd, want.c_str(),
                      std::strerror(e), current.c_str());
        else
            IWEMU_LOG(warn, "tcp_congestion %s: %s (kernel modules and net.ipv4.tcp_allowed_congestion_control "
                      "decide what a process may choose); keeping %s", want.c_str(), std::strerror(e),
                      current.c_str());
        return current;
    }
    return want;
}

void apply_liveness(int fd, uint32_t timeout_ms)
{
    if (timeout_ms == 0) return;
    const unsigned user_timeout = timeout_ms;
    // Keepalive in whole seconds: probing starts after a third of the bound
    // idle, then one probe every sixth; TCP_USER_TIMEOUT also caps how long
    // unanswered probes may go on, so the bound holds whatever the rounding.
    const int idle = std::max(1u, timeout_ms / 3000);
    const int interval = std::max(1u, timeout_ms / 6000);
    const int probes = std::max(1, static_cast<int>((timeout_ms / 1000 - idle) / interval));
    const int on = 1;
    if (setsockopt(fd, IPPROTO_TCP, TCP_USER_TIMEOUT, &user_timeout, sizeof user_timeout) != 0 ||
        setsockopt(fd, SOL_SOCKET, SO_KEEPALIVE, &on, sizeof on) != 0 ||
        setsockopt(fd, IPPROTO_TCP, TCP_KEEPIDLE, &idle, sizeof idle) != 0 ||
        setsockopt(fd, IPPROTO_TCP, TCP_KEEPINTVL, &interval, sizeof interval) != 0 ||
        setsockopt(fd, IPPROTO_TCP, TCP_KEEPCNT, &probes, sizeof probes) != 0)
        IWEMU_LOG(warn, "fd %d: liveness timeout %u ms: %s", fd, timeout_ms, std::strerror(errno));
}

}  // namespace iwemu
