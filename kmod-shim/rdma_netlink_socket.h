// socket(AF_NETLINK, *, NETLINK_RDMA) answered in-process (the `rdma` tool,
// libibverbs' and librdmacm's netlink discovery).  The application's fd is
// one end of an AF_UNIX SOCK_SEQPACKET pair, so poll/select/epoll and
// blocking reads work as on a netlink socket; the shim holds the other end
// and writes the replies (nldev_commands.h) there as the request is sent.
// Replies that do not fit the socket buffer wait in a queue that every
// receive call tops up first.  IWEMU_NETLINK=off refuses the socket
// (EPROTONOSUPPORT, as a kernel without RDMA): discovery then uses sysfs.
#pragma once

#include <sys/socket.h>
#include <sys/types.h>

namespace iwemu::shim {

bool rdma_netlink_enabled();
// The new fd, or -1 with errno.
int rdma_netlink_socket(int type);
void rdma_netlink_close(int fd);

int rdma_netlink_bind(int fd, const sockaddr* addr, socklen_t len);
int rdma_netlink_getsockname(int fd, sockaddr* addr, socklen_t* len);
int rdma_netlink_setsockopt(int fd, int level, int name, const void* value, socklen_t len, bool* handled);
int rdma_netlink_getsockopt(int fd, int level, int name, void* value, socklen_t* len, bool* handled);
ssize_t rdma_netlink_sendmsg(int fd, const msghdr* msg);
// Tops up the socket from the queue, then the real recvmsg, then the
// sender's address (the kernel, port 0) in msg_name.
ssize_t rdma_netlink_recvmsg(int fd, msghdr* msg, int flags, ssize_t (*real_recvmsg)(int, msghdr*, int));

}  // namespace iwemu::shim
