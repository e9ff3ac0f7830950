#include "kmod-shim/ucma_address.h"

#include <arpa/inet.h>
#include <dirent.h>
#include <endian.h>
#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "emulator/emulator.h"
#include "kmod-shim/ucma_abi.h"

namespace iwemu::shim {

socklen_t sockaddr_size(int family) {
    switch (family) {
    case AF_INET: return sizeof(sockaddr_in);
    case AF_INET6: return sizeof(sockaddr_in6);
    default: return 0;
    }
}

bool is_wildcard(const sockaddr_storage& addr) {
    if (addr.ss_family == AF_INET)
        return reinterpret_cast<const sockaddr_in&>(addr).sin_addr.s_addr == htonl(INADDR_ANY);
    if (addr.ss_family == AF_INET6)
        return IN6_IS_ADDR_UNSPECIFIED(&reinterpret_cast<const sockaddr_in6&>(addr).sin6_addr);
    return true;
}

bool is_loopback(const sockaddr_storage& addr) {
    if (addr.ss_family == AF_INET)
        return (ntohl(reinterpret_cast<const sockaddr_in&>(addr).sin_addr.s_addr) >> 24) == 127;
    if (addr.ss_family == AF_INET6)
        return IN6_IS_ADDR_LOOPBACK(&reinterpret_cast<const sockaddr_in6&>(addr).sin6_addr);
    return false;
}

bool same_address(const sockaddr_storage& a, const sockaddr_storage& b) {
    if (a.ss_family != b.ss_family) return false;
    if (a.ss_family == AF_INET)
        return reinterpret_cast<const sockaddr_in&>(a).sin_addr.s_addr ==
               reinterpret_cast<const sockaddr_in&>(b).sin_addr.s_addr;
    if (a.ss_family == AF_INET6)
        return IN6_ARE_ADDR_EQUAL(&reinterpret_cast<const sockaddr_in6&>(a).sin6_addr,
                                  &reinterpret_cast<const sockaddr_in6&>(b).sin6_addr);
    return false;
}

uint16_t port_of(const sockaddr_storage& addr) {
    if (addr.ss_family == AF_INET) return ntohs(reinterpret_cast<const sockaddr_in&>(addr).sin_port);
    if (addr.ss_family == AF_INET6) return ntohs(reinterpret_cast<const sockaddr_in6&>(addr).sin6_port);
    return 0;
}

void set_port(sockaddr_storage& addr, uint16_t port) {
    if (addr.ss_family == AF_INET) reinterpret_cast<sockaddr_in&>(addr).sin_port = htons(port);
    if (addr.ss_family == AF_INET6) reinterpret_cast<sockaddr_in6&>(addr).sin6_port = htons(port);
}

int copy_sockaddr(const void* user, size_t len, sockaddr_storage* out) {
    *out = {};
    if (len < sizeof(sa_family_t)) return -EINVAL;
    sa_family_t family;
    std::memcpy(&family, user, sizeof family);
    if (family == abi::af_ib) return -EAFNOSUPPORT;  // no IB devices here: librdmacm keeps the IP command set
    socklen_t size = sockaddr_size(family);
    if (size == 0 || len < size) return -EINVAL;
    std::memcpy(out, user, size);
    return 0;
}

int reserve_port(sockaddr_storage* addr, int afonly, int* fd_out) {
    int fd = ::socket(addr->ss_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0) return -errno;
    int one = 1;
    ::setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    if (addr->ss_family == AF_INET6 && afonly >= 0)
        ::setsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, &afonly, sizeof afonly);
    if (::bind(fd, reinterpret_cast<const sockaddr*>(addr), sockaddr_size(addr->ss_family)) < 0) {
        int err = errno;
        ::close(fd);
        return -err;
    }
    sockaddr_storage bound{};
    socklen_t len = sizeof bound;
    ::getsockname(fd, reinterpret_cast<sockaddr*>(&bound), &len);
    set_port(*addr, port_of(bound));
    *fd_out = fd;
    return 0;
}

int route_source(const sockaddr_storage& dst_in, sockaddr_storage* src) {
    sockaddr_storage dst = dst_in;
    if (is_wildcard(dst)) {  // cma_resolve_loopback
        if (dst.ss_family == AF_INET)
            reinterpret_cast<sockaddr_in&>(dst).sin_addr.s_addr = htonl(INADDR_LOOPBACK);
        else
            reinterpret_cast<sockaddr_in6&>(dst).sin6_addr = in6addr_loopback;
    }
    if (port_of(dst) == 0) set_port(dst, 9);  // connect() on UDP needs some port; nothing is sent
    int fd = ::socket(dst.ss_family, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    if (fd < 0) return -errno;
    if (::connect(fd, reinterpret_cast<const sockaddr*>(&dst), sockaddr_size(dst.ss_family)) < 0) {
        int err = errno;
        ::close(fd);
        return -err;
    }
    *src = {};
    socklen_t len = sizeof *src;
    int rc = ::getsockname(fd, reinterpret_cast<sockaddr*>(src), &len) < 0 ? -errno : 0;
    ::close(fd);
    set_port(*src, 0);
    return rc;
}

namespace {

// "xxxx:xxxx:xxxx:xxxx" -> the 8 bytes in that order (== __be64 as libibverbs returns it).
uint64_t parse_guid(const char* text) {
    unsigned g[4];
    if (std::sscanf(text, "%4x:%4x:%4x:%4x", &g[0], &g[1], &g[2], &g[3]) != 4) return 0;
    uint64_t host = (uint64_t{g[0]} << 48) | (uint64_t{g[1]} << 32) | (uint64_t{g[2]} << 16) | g[3];
    return htobe64(host);
}

uint64_t read_sysfs_guid() {
    const char* root = std::getenv("SYSFS_PATH");
    std::string base = std::string(root && *root ? root : "/sys") + "/class/infiniband";
    DIR* dir = ::opendir(base.c_str());
    if (!dir) return 0;
    std::vector<std::string> names;
    while (dirent* e = ::readdir(dir))
        if (e->d_name[0] != '.') names.emplace_back(e->d_name);
    ::closedir(dir);
    std::sort(names.begin(), names.end());
    for (const auto& name : names) {
        std::string path = base + "/" + name + "/node_guid";
        int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
        if (fd < 0) continue;
        char buf[32] = {};
        ssize_t n = ::read(fd, buf, sizeof buf - 1);
        ::close(fd);
        if (n <= 0) continue;
        if (uint64_t guid = parse_guid(buf)) return guid;
    }
    return 0;
}

}  // namespace

uint64_t device_node_guid_be() {
    // Read once: the tree is generated before the application starts and
    // librdmacm caches its own copy at ucma_init().
    static const uint64_t guid = [] {
        uint64_t g = read_sysfs_guid();
        return g ? g : htobe64(Emulator::instance().device_attributes().node_guid);
    }();
    return guid;
}

}  // namespace iwemu::shim
