// Contract between the shim's libc interposition layer (libc_interpose.cpp)
// and the emulation of /dev/infiniband/rdma_cm (ucma_*.cpp).
//
// The interposer only routes: open/openat of "/dev/infiniband/rdma_cm" go to
// ucma_open(); write() on an fd for which ucma_owns() is true goes to
// ucma_write(); close() calls ucma_close() before the real close(); fstat()
// on such an fd reports a character device.  Everything else (read, poll,
// epoll, fcntl O_NONBLOCK) acts on the real fd ucma_open() returned, so its
// readiness must mean "an event is queued".
#pragma once

#include <sys/types.h>

#include <cstddef>

namespace iwemu::shim {

// Opens one rdma_cm file.  Returns a real fd (eventfd/socketpair chosen by the
// implementation so poll/epoll readiness is real) or -1 with errno set.
// open_flags are the flags the application passed to open() (O_CLOEXEC,
// O_NONBLOCK are honoured on the returned fd).
int ucma_open(int open_flags);

// True if fd was returned by ucma_open() and not yet closed.
bool ucma_owns(int fd);

// Executes one ucma command (struct rdma_ucm_cmd_hdr + payload, ABI 4).
// Returns len on success or -1 with errno set, exactly like the kernel's
// ucma_write().  Only RDMA_USER_CM_CMD_GET_EVENT may block.
ssize_t ucma_write(int fd, const void* buf, size_t len);

// Forgets fd and destroys the ids it owns; called before the real close(fd).
void ucma_close(int fd);

}  // namespace iwemu::shim
