// The open file behind a /dev/infiniband/uverbsN fd, as the kernel's
// struct ib_uverbs_file: one per open(), shared by every dup()/dup2()/
// dup3()/fcntl(F_DUPFD) copy of the fd, so a copy passed to
// ibv_import_device names the same verbs objects as the original
// (kernel-surface.md §2; rdma-core's shared PD).  Each copy is its own fd
// in the fd table; closing one leaves the others.  Only open, dup and close
// touch this, never the data path.
#pragma once

#include <cstdint>

namespace iwemu::shim {

// A fresh file for fd, just opened.
void uverbs_file_open(int fd);
// newfd is a copy of oldfd (a uverbs fd): the same file.
void uverbs_file_dup(int oldfd, int newfd);
// fd is being closed (or replaced by dup2): forget it; a pending async fd
// offered on it is withdrawn.
void uverbs_file_close(int fd);

// UVERBS_METHOD_ASYNC_EVENT_ALLOC on fd: the fd offered for it by the
// provider (iwemu_shim_uverbs_offer_async_fd), taken; -1 if none.
int uverbs_file_take_async_fd(int fd);

}  // namespace iwemu::shim

extern "C" {
// Which open file fd refers to: a number unique for the process's lifetime,
// the same for every copy of the fd; 0 if fd is no uverbs fd.  Looked up
// by the provider with dlsym(RTLD_DEFAULT, ...).
uint64_t iwemu_shim_uverbs_file(int fd);
// libibverbs asks the "kernel" for an imported context's async event file
// (ibv_import_device runs ASYNC_EVENT/ALLOC on the cmd fd after the
// provider's import_context): the provider offers the fd it made for it,
// which that ioctl then returns.  -1 withdraws.  0, or -1/EBADF if cmd_fd is
// no uverbs fd.
int iwemu_shim_uverbs_offer_async_fd(int cmd_fd, int async_fd);
}
