// The one TCP connection of the plain-TCP baselines (spin_wait_lat,
// stream_bw): the server accepts one peer, the client connects, retrying
// while the server starts.  Errors end the program with the program's name.
#pragma once

#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

namespace tcp_pair {

// The arguments every baseline takes: -p PORT, -s SIZE, -n ITERS, --cc NAME
// (the connection's TCP congestion control; none: the system's) and the
// HOST operand (none: server).  Programs set their own defaults.
struct CommonArgs {
    std::string host;
    std::string port;
    size_t size = 0;
    unsigned iters = 0;
    std::string cc;
};

// Takes argument `a` if it is one of CommonArgs (`value()` yields an
// option's value); false for anything else.
template <class Value>
bool take_common_arg(const std::string& a, Value value, CommonArgs& c)
{
    if (a == "-p")
        c.port = value();
    else if (a == "-s")
        c.size = std::strtoul(value(), nullptr, 10);
    else if (a == "-n")
        c.iters = static_cast<unsigned>(std::strtoul(value(), nullptr, 10));
    else if (a == "--cc")
        c.cc = value();
    else if (!a.empty() && a[0] != '-' && c.host.empty())
        c.host = a;
    else
        return false;
    return true;
}

[[noreturn]] inline void die(const char* prog, const char* what)
{
    std::fprintf(stderr, "%s: %s: %s\n", prog, what, std::strerror(errno));
    std::exit(1);
}

// Empty host: listen on port and accept one connection; else connect to it
// (for up to 10 s).  TCP_NODELAY is set, as iwemu sets it (MPA-011), and
// the congestion control cc unless it is empty (a refusal ends the program:
// a baseline must run what it was asked to).
inline int connect_or_accept(const char* prog, const std::string& host, const std::string& port,
                             const std::string& cc = {})
{
    addrinfo hints{};
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    hints.ai_flags = host.empty() ? AI_PASSIVE : 0;
    addrinfo* res = nullptr;
    if (int rc = getaddrinfo(host.empty() ? nullptr : host.c_str(), port.c_str(), &hints, &res)) {
        std::fprintf(stderr, "%s: %s\n", prog, gai_strerror(rc));
        std::exit(1);
    }
    int fd = socket(res->ai_family, SOCK_STREAM, 0);
    if (fd < 0) die(prog, "socket");
    if (host.empty()) {
        int one = 1;
        setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
        if (bind(fd, res->ai_addr, res->ai_addrlen) || listen(fd, 1)) die(prog, "listen");
        int conn = accept(fd, nullptr, nullptr);
        if (conn < 0) die(prog, "accept");
        close(fd);
        fd = conn;
    } else {
        int tries = 0;
        while (connect(fd, res->ai_addr, res->ai_addrlen) != 0) {
            if (++tries > 1000) die(prog, "connect");
            usleep(10000);
        }
    }
    freeaddrinfo(res);
    int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    if (!cc.empty() && setsockopt(fd, IPPROTO_TCP, TCP_CONGESTION, cc.data(), static_cast<socklen_t>(cc.size())) != 0)
        die(prog, ("TCP_CONGESTION " + cc).c_str());
    return fd;
}

}  // namespace tcp_pair
