// The part of ib_uverbs that libibverbs reaches on its own, whatever the
// provider does (kernel-surface.md §3): legacy write() commands on cmd_fd
// and the RDMA_VERBS_IOCTL probes.  The iwemu provider never issues
// ibv_cmd_*, so only CREATE_COMP_CHANNEL has to be answered.
#pragma once

#include <sys/types.h>

#include <cstddef>

namespace iwemu::shim {

// One write() on an open /dev/infiniband/uverbsN.  Returns len or -1/errno.
ssize_t uverbs_write(int fd, const void* buf, size_t len);

// ioctl() on an open /dev/infiniband/uverbsN: -1/ENOTTY, which makes
// libibverbs use write() commands and the sysfs GID fallback (§3.1, §3.5)
// and marks every ioctl unsupported for the context after the first probe.
// One exception: ASYNC_EVENT/ALLOC, which ibv_import_device issues
// unconditionally, returns the async fd the provider offered for the
// imported context (uverbs_file.h); without an offer it is ENOTTY too.
int uverbs_ioctl(int fd, unsigned long request, void* arg);

}  // namespace iwemu::shim
