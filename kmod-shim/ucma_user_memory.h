// copy_from_user / copy_to_user for the rdma_cm emulation: the application
// hands over raw pointers (the write() buffer, response and optval
// pointers).  A bad one must end in EFAULT as in the kernel, not in a crash
// inside the shim, so copies go through process_vm_readv/writev on our own
// process, which the kernel checks page by page.
#pragma once

#include <cstddef>
#include <cstdint>

namespace iwemu::shim {

// 0 or -EFAULT.
int copy_from_user(void* to, uint64_t from, size_t len);
int copy_to_user(uint64_t to, const void* from, size_t len);

}  // namespace iwemu::shim
