// The 23 ucma commands (ABI 4) as the kernel's ucma_write() dispatches them:
// one write() = one command, the response copied to the user pointer the
// command carries, write() returning the full length on success.
//
// Where this differs from drivers/infiniband/core/ucma.c + cma.c on an
// iWARP device, on purpose:
// - Only RDMA_PS_TCP ids may bind or resolve (EPROTONOSUPPORT otherwise):
//   an iWARP device has no UD QPs, and failing early keeps udaddy's server
//   from waiting forever.  AF_IB addresses get EAFNOSUPPORT, which is what
//   keeps librdmacm on the IP command set.
// - Address resolution answers at once (the device is on every local
//   address); ROUTE_RESOLVED needs no path record.
// - A refused TCP connect is retried for a few hundred milliseconds before
//   REJECTED (ucma_cm_link.h, ucma_start_connect).
// - The rdma_cm fd is an eventfd: POLLIN exactly while an event is queued,
//   but it also reports POLLOUT, which the kernel's file never does.
// - close() leaves threads blocked in GET_EVENT asleep (the kernel keeps
//   the file alive for them); a signal still ends the wait with EINTR.
// - After fork() the child starts with no ids (its inherited fds stay
//   usable); the kernel would share the parent's ids with it.
// - No TIMEWAIT_EXIT, CONNECT_RESPONSE or multicast events: iWARP has none.
#pragma once

#include <sys/types.h>

#include <cstddef>
#include <memory>

namespace iwemu::shim {

struct UcmaFile;

// Executes the command in buf[0, len) on `file` (whose fd the write went
// to).  Returns 0 or -errno; only GET_EVENT blocks (without holding
// ucma_lock()).
int ucma_execute(const std::shared_ptr<UcmaFile>& file, const void* buf, size_t len);

// The open rdma_cm file behind fd (ucma_device.cpp), or nullptr.
std::shared_ptr<UcmaFile> ucma_file_by_fd(int fd);

// Destroys every id on `file` (close() of the rdma_cm fd).
void ucma_destroy_file_ids(UcmaFile* file);

}  // namespace iwemu::shim
