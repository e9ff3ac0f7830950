#include "kmod-shim/rdma_netlink_socket.h"

#include <fcntl.h>
#include <linux/netlink.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <vector>

#include "kmod-shim/fd_table.h"
#include "kmod-shim/nldev_backend.h"
#include "kmod-shim/nldev_commands.h"

#ifndef NETLINK_RDMA
#define NETLINK_RDMA 20
#endif

namespace iwemu::shim {
namespace {

struct NlSocket {
    int kernel_fd = -1;  // our end of the pair
    uint32_t port_id = 0;
    uint32_t groups = 0;
    std::deque<std::vector<uint8_t>> pending;  // replies the socket had no room for yet
};

std::mutex g_lock;
std::map<int, std::unique_ptr<NlSocket>>& sockets()
{
    static auto* m = new std::map<int, std::unique_ptr<NlSocket>>;  // never destroyed: late close()
    return *m;
}

NlSocket* find(int fd)
{
    auto it = sockets().find(fd);
    return it == sockets().end() ? nullptr : it->second.get();
}

// netlink_autobind(): the first socket gets the pid, later ones negative numbers.
uint32_t autobind_port()
{
    static std::atomic<uint32_t> next{0};
    uint32_t n = next.fetch_add(1);
    if (n == 0) return static_cast<uint32_t>(getpid());
    return 0x80000000u - n;
}

void flush(NlSocket& s)
{
    while (!s.pending.empty()) {
        const auto& d = s.pending.front();
        if (send(s.kernel_fd, d.data(), d.size(), MSG_DONTWAIT | MSG_NOSIGNAL) < 0) return;
        s.pending.pop_front();
    }
}

}  // namespace

bool rdma_netlink_enabled()
{
    const char* v = std::getenv("IWEMU_NETLINK");
    return !(v && (!std::strcmp(v, "off") || !std::strcmp(v, "0") || !std::strcmp(v, "no")));
}

int rdma_netlink_socket(int type)
{
    const int base = type & ~(SOCK_CLOEXEC | SOCK_NONBLOCK);
    if (base != SOCK_RAW && base != SOCK_DGRAM) {
        errno = ESOCKTNOSUPPORT;
        return -1;
    }
    int sv[2];
    if (socketpair(AF_UNIX, SOCK_SEQPACKET | (type & (SOCK_CLOEXEC | SOCK_NONBLOCK)), 0, sv) != 0) return -1;
    fcntl(sv[1], F_SETFL, O_NONBLOCK);
    fcntl(sv[1], F_SETFD, FD_CLOEXEC);
    auto s = std::make_unique<NlSocket>();
    s->kernel_fd = sv[1];
    {
        std::lock_guard g(g_lock);
        sockets()[sv[0]] = std::move(s);
    }
    fd_table_set(sv[0], {FdKind::rdma_netlink, 0});
    return sv[0];
}

void rdma_netlink_close(int fd)
{
    fd_table_clear(fd);
    std::unique_ptr<NlSocket> s;
    {
        std::lock_guard g(g_lock);
        auto it = sockets().find(fd);
        if (it == sockets().end()) return;
        s = std::move(it->second);
        sockets().erase(it);
    }
    close(s->kernel_fd);
}

int rdma_netlink_bind(int fd, const sockaddr* addr, socklen_t len)
{
    if (!addr || len < sizeof(sockaddr_nl) || addr->sa_family != AF_NETLINK) {
        errno = EINVAL;
        return -1;
    }
    sockaddr_nl nl;
    std::memcpy(&nl, addr, sizeof nl);
    std::lock_guard g(g_lock);
    NlSocket* s = find(fd);
    if (!s) {
        errno = EBADF;
        return -1;
    }
    if (s->port_id && nl.nl_pid && nl.nl_pid != s->port_id) {
        errno = EINVAL;  // netlink_bind: already bound elsewhere
        return -1;
    }
    s->port_id = nl.nl_pid ? nl.nl_pid : (s->port_id ? s->port_id : autobind_port());
    s->groups = nl.nl_groups;
    return 0;
}

int rdma_netlink_getsockname(int fd, sockaddr* addr, socklen_t* len)
{
    std::lock_guard g(g_lock);
    NlSocket* s = find(fd);
    if (!s || !len) {
        errno = s ? EFAULT : EBADF;
        return -1;
    }
    sockaddr_nl nl{};
    nl.nl_family = AF_NETLINK;
    nl.nl_pid = s->port_id;
    nl.nl_groups = s->groups;
    std::memcpy(addr, &nl, std::min<size_t>(*len, sizeof nl));
    *len = sizeof nl;
    return 0;
}

int rdma_netlink_setsockopt(int, int level, int, const void*, socklen_t, bool* handled)
{
    // SOL_NETLINK options (EXT_ACK, CAP_ACK, GET_STRICT_CHK, ...) change
    // nothing here; SOL_SOCKET ones (buffer sizes) act on the pair.
    *handled = level == SOL_NETLINK;
    return 0;
}

int rdma_netlink_getsockopt(int, int level, int name, void* value, socklen_t* len, bool* handled)
{
    *handled = level == SOL_NETLINK || (level == SOL_SOCKET && (name == SO_DOMAIN || name == SO_PROTOCOL || name == SO_TYPE));
    if (!*handled) return 0;
    int v = 0;
    if (level == SOL_SOCKET) v = name == SO_DOMAIN ? AF_NETLINK : name == SO_PROTOCOL ? NETLINK_RDMA : SOCK_RAW;
    if (!value || !len || *len < sizeof v) {
        errno = EINVAL;
        return -1;
    }
    std::memcpy(value, &v, sizeof v);
    *len = sizeof v;
    return 0;
}

ssize_t rdma_netlink_sendmsg(int fd, const msghdr* msg)
{
    if (msg->msg_name && msg->msg_namelen >= sizeof(sockaddr_nl)) {
        sockaddr_nl to;
        std::memcpy(&to, msg->msg_name, sizeof to);
        if (to.nl_family != AF_NETLINK) {
            errno = EINVAL;
            return -1;
        }
        if (to.nl_pid != 0) {
            errno = ECONNREFUSED;  // only the kernel (port 0) listens on NETLINK_RDMA here
            return -1;
        }
    }
    std::vector<uint8_t> request;
    for (size_t i = 0; i < msg->msg_iovlen; ++i) {
        const auto* p = static_cast<const uint8_t*>(msg->msg_iov[i].iov_base);
        request.insert(request.end(), p, p + msg->msg_iov[i].iov_len);
    }
    uint32_t port;
    {
        std::lock_guard g(g_lock);
        NlSocket* s = find(fd);
        if (!s) {
            errno = EBADF;
            return -1;
        }
        if (!s->port_id) s->port_id = autobind_port();
        port = s->port_id;
    }
    // Answered without the lock: link add rewrites files.
    auto replies = nldev_answer(request.data(), request.size(), port, shim_nldev_backend());
    std::lock_guard g(g_lock);
    NlSocket* s = find(fd);
    if (!s) {
        errno = EBADF;
        return -1;
    }
    for (auto& r : replies) s->pending.push_back(std::move(r));
    flush(*s);
    return static_cast<ssize_t>(request.size());
}

ssize_t rdma_netlink_recvmsg(int fd, msghdr* msg, int flags, ssize_t (*real_recvmsg)(int, msghdr*, int))
{
    {
        std::lock_guard g(g_lock);
        if (NlSocket* s = find(fd)) flush(*s);
    }
    void* name = msg->msg_name;
    const socklen_t name_len = msg->msg_namelen;
    msg->msg_name = nullptr;
    msg->msg_namelen = 0;
    ssize_t n = real_recvmsg(fd, msg, flags);
    msg->msg_name = name;
    msg->msg_namelen = name_len;
    if (n >= 0 && name) {
        sockaddr_nl from{};
        from.nl_family = AF_NETLINK;  // from the kernel: port 0, no groups
        std::memcpy(name, &from, std::min<size_t>(name_len, sizeof from));
        msg->msg_namelen = sizeof from;
    }
    if (n >= 0) {  // the queue may have more for the next read
        std::lock_guard g(g_lock);
        if (NlSocket* s = find(fd)) flush(*s);
    }
    return n;
}

}  // namespace iwemu::shim
