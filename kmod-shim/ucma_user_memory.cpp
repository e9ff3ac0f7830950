#include "kmod-shim/ucma_user_memory.h"

#include <sys/uio.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstring>

namespace iwemu::shim {

namespace {

// Seccomp profiles may forbid process_vm_*; then fall back to plain copies
// (the kernel-like EFAULT is lost, nothing else).
std::atomic<bool> checked_copies{true};

bool unavailable(int err) { return err == ENOSYS || err == EPERM || err == EACCES; }

}  // namespace

int copy_from_user(void* to, uint64_t from, size_t len) {
    if (len == 0) return 0;
    if (from == 0) return -EFAULT;
    void* src = reinterpret_cast<void*>(static_cast<uintptr_t>(from));
    if (checked_copies.load(std::memory_order_relaxed)) {
        iovec local{to, len}, remote{src, len};
        ssize_t n = ::process_vm_readv(::getpid(), &local, 1, &remote, 1, 0);
        if (n == static_cast<ssize_t>(len)) return 0;
        if (n >= 0 || !unavailable(errno)) return -EFAULT;
        checked_copies.store(false, std::memory_order_relaxed);
    }
    std::memcpy(to, src, len);
    return 0;
}

int copy_to_user(uint64_t to, const void* from, size_t len) {
    if (len == 0) return 0;
    if (to == 0) return -EFAULT;
    void* dst = reinterpret_cast<void*>(static_cast<uintptr_t>(to));
    if (checked_copies.load(std::memory_order_relaxed)) {
        iovec local{const_cast<void*>(from), len}, remote{dst, len};
        ssize_t n = ::process_vm_writev(::getpid(), &local, 1, &remote, 1, 0);
        if (n == static_cast<ssize_t>(len)) return 0;
        if (n >= 0 || !unavailable(errno)) return -EFAULT;
        checked_copies.store(false, std::memory_order_relaxed);
    }
    std::memcpy(dst, from, len);
    return 0;
}

}  // namespace iwemu::shim
