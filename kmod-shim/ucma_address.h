// Address handling of the rdma_cm emulation: what the kernel's rdma_bind_addr
// / rdma_resolve_addr / cma_acquire_dev work out from the routing table.  The
// iwemu device is reachable on every local address, so "which device" is
// always iwemu's; what remains is checking locality, picking the source
// address toward a destination, and holding a TCP port for a bound id.
#pragma once

#include <netinet/in.h>
#include <sys/socket.h>

#include <cstdint>

namespace iwemu::shim {

// Size of a sockaddr of this family (0 for families rdma_cm over IP refuses).
socklen_t sockaddr_size(int family);
bool is_wildcard(const sockaddr_storage& addr);
bool is_loopback(const sockaddr_storage& addr);
bool same_address(const sockaddr_storage& a, const sockaddr_storage& b);  // ports ignored
uint16_t port_of(const sockaddr_storage& addr);  // host order
void set_port(sockaddr_storage& addr, uint16_t port);

// Copies a user sockaddr (family-checked) into storage.  -EINVAL for
// families other than AF_INET / AF_INET6, -EAFNOSUPPORT for AF_IB.
int copy_sockaddr(const void* user, size_t len, sockaddr_storage* out);

// Binds a TCP socket (SO_REUSEADDR; IPV6_V6ONLY per afonly >= 0) to addr,
// which checks that the address is local and reserves the port (0 picks an
// ephemeral one).  On success *fd holds the socket and addr the bound port.
int reserve_port(sockaddr_storage* addr, int afonly, int* fd);

// The local address the routing table uses toward dst (port 0).  dst may be
// a wildcard, which rdma_cm resolves as loopback.  0 or -errno
// (-ENETUNREACH, -EHOSTUNREACH, -EADDRNOTAVAIL).
int route_source(const sockaddr_storage& dst, sockaddr_storage* src);

// The node GUID of the device answering for every local address, exactly as
// librdmacm gets it from ibv_get_device_guid(): the sysfs node_guid file
// (big-endian), else the emulator's own value.
uint64_t device_node_guid_be();

}  // namespace iwemu::shim
