// Which file descriptors the shim stands behind, as the kernel would know
// from the struct file.  Every interposed read()/write()/ioctl()/close()/fstat()
// asks this table first, so the lookup is a lock-free array read for the
// usual fd range.
#pragma once

#include <cstdint>

namespace iwemu::shim {

enum class FdKind : uint8_t {
    none = 0,
    uverbs_cmd,    // an open /dev/infiniband/uverbsN (libibverbs' cmd_fd)
    comp_channel,  // the read end of a completion channel handed out by CREATE_COMP_CHANNEL
    ucma,          // an open /dev/infiniband/rdma_cm (served by ucma_device.h)
    rdma_netlink,  // a NETLINK_RDMA socket (rdma_netlink_socket.h)
};

struct FdEntry {
    FdKind kind = FdKind::none;
    uint8_t device = 0;  // uverbs_cmd: N of uverbsN
};

void fd_table_set(int fd, FdEntry entry);
FdEntry fd_table_get(int fd);
void fd_table_clear(int fd);

}  // namespace iwemu::shim
