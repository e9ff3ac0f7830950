// The 23 ucma commands (ABI 4) as the kernel's ucma_write() dispatches them:
// one write() = one command, the response copied to the user pointer the
// command carries, write() returning the full length on success.
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
