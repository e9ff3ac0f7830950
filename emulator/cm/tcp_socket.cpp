#include "emulator/cm/tcp_socket.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>

namespace iwemu::cm {

socklen_t sockaddr_length(const sockaddr_storage& addr)
{
    switch (addr.ss_family) {
    case AF_INET: return sizeof(sockaddr_in);
    case AF_INET6: return sizeof(sockaddr_in6);
    default: return 0;
    }
}

int open_listener(const sockaddr* addr, socklen_t addr_len, int backlog, sockaddr_storage* bound)
{
    if (!addr || (addr->sa_family != AF_INET && addr->sa_family != AF_INET6) ||
        addr_len < (addr->sa_family == AF_INET ? sizeof(sockaddr_in) : sizeof(sockaddr_in6)))
        return -EINVAL;
    const int fd = ::socket(addr->sa_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd < 0)
        return -errno;
    const int one = 1;
    ::setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    if (::bind(fd, addr, addr_len) != 0 || ::listen(fd, backlog > 0 ? backlog : SOMAXCONN) != 0) {
        const int err = errno;
        ::close(fd);
        return -err;
    }
    if (bound)
        local_address(fd, bound);
    return fd;
}

int start_connect(const sockaddr_storage& remote, const std::optional<sockaddr_storage>& local,
                  int* connect_errno)
{
    const socklen_t len = sockaddr_length(remote);
    if (len == 0)
        return -EAFNOSUPPORT;
    if (local && local->ss_family != remote.ss_family)
        return -EINVAL;
    const int fd = ::socket(remote.ss_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd < 0)
        return -errno;
    set_nodelay(fd);
    if (local && ::bind(fd, reinterpret_cast<const sockaddr*>(&*local), len) != 0) {
        const int err = errno;
        ::close(fd);
        return -err;
    }
    *connect_errno = 0;
    if (::connect(fd, reinterpret_cast<const sockaddr*>(&remote), len) != 0) {
        const int err = errno;
        switch (err) {
        case EINPROGRESS:
        case ECONNREFUSED:
        case ENETUNREACH:
        case EHOSTUNREACH:
        case ETIMEDOUT:
        case ECONNRESET:
            *connect_errno = err;  // an outcome, reported as an event
            break;
        default:
            ::close(fd);
            return -err;
        }
    }
    return fd;
}

const char* format_address(const sockaddr_storage& addr, char* out, size_t size)
{
    char host[INET6_ADDRSTRLEN] = "?";
    unsigned port = 0;
    if (addr.ss_family == AF_INET) {
        const auto& in = reinterpret_cast<const sockaddr_in&>(addr);
        ::inet_ntop(AF_INET, &in.sin_addr, host, sizeof(host));
        port = ntohs(in.sin_port);
        std::snprintf(out, size, "%s:%u", host, port);
    } else if (addr.ss_family == AF_INET6) {
        const auto& in6 = reinterpret_cast<const sockaddr_in6&>(addr);
        ::inet_ntop(AF_INET6, &in6.sin6_addr, host, sizeof(host));
        port = ntohs(in6.sin6_port);
        std::snprintf(out, size, "[%s]:%u", host, port);
    } else {
        std::snprintf(out, size, "?");
    }
    return out;
}

int socket_error(int fd)
{
    int err = 0;
    socklen_t len = sizeof(err);
    if (::getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len) != 0)
        return errno;
    return err;
}

void set_nodelay(int fd)
{
    // Whole FPDUs go out at once (RFC 5044 §5.1); startup frames too.
    const int one = 1;
    ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
}

void local_address(int fd, sockaddr_storage* out)
{
    std::memset(out, 0, sizeof(*out));
    socklen_t len = sizeof(*out);
    ::getsockname(fd, reinterpret_cast<sockaddr*>(out), &len);
}

void peer_address(int fd, sockaddr_storage* out)
{
    std::memset(out, 0, sizeof(*out));
    socklen_t len = sizeof(*out);
    ::getpeername(fd, reinterpret_cast<sockaddr*>(out), &len);
}

uint32_t effective_mss(int fd)
{
    int mss = 0;
    socklen_t len = sizeof(mss);
    if (::getsockopt(fd, IPPROTO_TCP, TCP_MAXSEG, &mss, &len) != 0 || mss <= 0)
        return 536;
    return static_cast<uint32_t>(mss);
}

void close_graceful(int fd)
{
    if (fd < 0)
        return;
    ::shutdown(fd, SHUT_WR);
    ::close(fd);
}

void close_abortive(int fd)
{
    if (fd < 0)
        return;
    const linger lg{1, 0};
    ::setsockopt(fd, SOL_SOCKET, SO_LINGER, &lg, sizeof(lg));
    ::close(fd);
}

}  // namespace iwemu::cm
