// tcpi_total_retrans of another process's TCP socket: an exact-match
// SOCK_DIAG_BY_FAMILY request (linux/inet_diag.h) asking for INET_DIAG_INFO,
// as `ss -ti` gets it.  Taken when a reader takes its snapshot, never on
// the data path.
#include <linux/inet_diag.h>
#include <linux/netlink.h>
#include <linux/sock_diag.h>
#include <linux/rtnetlink.h>
#include <linux/tcp.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>

#include "emulator/status/status_reader.h"

namespace iwemu {

std::optional<uint32_t> tcp_retransmits(const sockaddr_storage& local, const sockaddr_storage& peer)
{
    if (local.ss_family != peer.ss_family || (local.ss_family != AF_INET && local.ss_family != AF_INET6))
        return std::nullopt;
    struct {
        nlmsghdr h;
        inet_diag_req_v2 r;
    } req{};
    req.h.nlmsg_len = sizeof req;
    req.h.nlmsg_type = SOCK_DIAG_BY_FAMILY;
    req.h.nlmsg_flags = NLM_F_REQUEST;
    req.r.sdiag_family = static_cast<uint8_t>(local.ss_family);
    req.r.sdiag_protocol = IPPROTO_TCP;
    req.r.idiag_ext = 1u << (INET_DIAG_INFO - 1);
    req.r.idiag_states = ~0u;
    req.r.id.idiag_cookie[0] = req.r.id.idiag_cookie[1] = INET_DIAG_NOCOOKIE;
    if (local.ss_family == AF_INET) {
        const auto& l = reinterpret_cast<const sockaddr_in&>(local);
        const auto& p = reinterpret_cast<const sockaddr_in&>(peer);
        req.r.id.idiag_sport = l.sin_port;
        req.r.id.idiag_dport = p.sin_port;
        std::memcpy(req.r.id.idiag_src, &l.sin_addr, 4);
        std::memcpy(req.r.id.idiag_dst, &p.sin_addr, 4);
    } else {
        const auto& l = reinterpret_cast<const sockaddr_in6&>(local);
        const auto& p = reinterpret_cast<const sockaddr_in6&>(peer);
        req.r.id.idiag_sport = l.sin6_port;
        req.r.id.idiag_dport = p.sin6_port;
        std::memcpy(req.r.id.idiag_src, &l.sin6_addr, 16);
        std::memcpy(req.r.id.idiag_dst, &p.sin6_addr, 16);
    }
    const int fd = socket(AF_NETLINK, SOCK_DGRAM | SOCK_CLOEXEC, NETLINK_SOCK_DIAG);
    if (fd < 0) return std::nullopt;
    timeval tv{1, 0};
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    std::optional<uint32_t> out;
    sockaddr_nl kernel{};
    kernel.nl_family = AF_NETLINK;
    if (sendto(fd, &req, sizeof req, 0, reinterpret_cast<sockaddr*>(&kernel), sizeof kernel) == sizeof req) {
        alignas(nlmsghdr) char buf[8192];
        const ssize_t n = recv(fd, buf, sizeof buf, 0);
        const auto* h = reinterpret_cast<const nlmsghdr*>(buf);
        if (n > 0 && NLMSG_OK(h, static_cast<size_t>(n)) && h->nlmsg_type == SOCK_DIAG_BY_FAMILY) {
            const auto* msg = static_cast<const inet_diag_msg*>(NLMSG_DATA(h));
            int len = static_cast<int>(h->nlmsg_len - NLMSG_LENGTH(sizeof *msg));
            for (auto* a = reinterpret_cast<const rtattr*>(msg + 1); RTA_OK(a, len); a = RTA_NEXT(a, len)) {
                if (a->rta_type != INET_DIAG_INFO) continue;
                tcp_info ti{};
                std::memcpy(&ti, RTA_DATA(a), std::min<size_t>(RTA_PAYLOAD(a), sizeof ti));
                out = ti.tcpi_total_retrans;
            }
        }
    }
    close(fd);
    return out;
}

}  // namespace iwemu
