// Fault-safe access to the memory of an on-demand-paging (ODP) region.
//
// An ODP region (IBV_ACCESS_ON_DEMAND, and the implicit one covering the
// whole address space) may name memory that is not mapped, or not with the
// right protection, when a peer's or a WR's access arrives.  An RNIC then
// takes a page fault it cannot resolve and fails the access; iwemu must do
// the same instead of taking SIGSEGV.  The kernel copies for us and reports
// EFAULT (process_vm_readv/writev on our own pid): a system call per access,
// paid only for ODP regions.  Regions registered without ON_DEMAND keep the
// plain copies: their memory must stay mapped (ibv_reg_mr(3)).
#pragma once

#include <cstddef>
#include <cstdint>

namespace iwemu {

// [addr, addr+len) can be read now (every page mapped and readable).
bool odp_readable(const void* addr, uint64_t len);

// [addr, addr+len) can be written now: every page mapped writable and
// populated for write (copy-on-write broken), so an in-place read-modify-
// write (an RFC 7306 atomic) cannot fault.  Kernels without
// MADV_POPULATE_WRITE: readable only.
bool odp_writable(void* addr, uint64_t len);

// Copies n octets to dst; false if any of dst cannot be written.  Octets
// before the fault may have been written (as an RNIC's DMA before a fault).
bool odp_write(void* dst, const void* src, size_t n);

// ibv_advise_mr prefetch: ask the kernel to fault the range in ahead of use.
// Returns 0 or the errno (EFAULT: part of it is not mapped).
int odp_prefetch(const void* addr, uint64_t len, bool for_write);

}  // namespace iwemu
