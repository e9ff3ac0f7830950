#include "emulator/odp_memory.h"

#include <sys/mman.h>
#include <sys/uio.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>

namespace iwemu {

namespace {

uintptr_t page_size()
{
    static const uintptr_t size = static_cast<uintptr_t>(sysconf(_SC_PAGESIZE));
    return size;
}

}  // namespace

bool odp_readable(const void* addr, uint64_t len)
{
    if (len == 0) return true;
    const uintptr_t start = reinterpret_cast<uintptr_t>(addr);
    if (start + len < start) return false;
    // One octet of every page the range touches, IOV_MAX pages per call: the
    // kernel faults each in (or fails with EFAULT) exactly as a DMA would.
    constexpr int batch = 1024;
    iovec remote[batch];
    char sink[batch];
    const uintptr_t ps = page_size();
    uintptr_t page = start & ~(ps - 1);
    const uintptr_t last = (start + len - 1) & ~(ps - 1);
    bool done = false;
    while (!done) {
        int n = 0;
        while (n < batch && !done) {
            remote[n++] = {reinterpret_cast<void*>(std::max(page, start)), 1};
            done = page == last;
            page += ps;
        }
        iovec local{sink, static_cast<size_t>(n)};
        if (process_vm_readv(getpid(), &local, 1, remote, static_cast<unsigned long>(n), 0) != n) return false;
    }
    return true;
}

bool odp_writable(void* addr, uint64_t len)
{
    if (len == 0) return true;
    const uintptr_t start = reinterpret_cast<uintptr_t>(addr);
    if (start + len < start) return false;
#ifdef MADV_POPULATE_WRITE
    // EINVAL means both "no such advice" (before Linux 5.14) and "mapping
    // not writable": one probe on a fresh writable page tells them apart.
    static const bool supported = [] {
        void* page = mmap(nullptr, page_size(), PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        if (page == MAP_FAILED) return false;
        const bool ok = madvise(page, page_size(), MADV_POPULATE_WRITE) == 0;
        munmap(page, page_size());
        return ok;
    }();
    if (supported) {
        const uintptr_t first = start & ~(page_size() - 1);
        // ENOMEM: not mapped; EINVAL: not writable; EFAULT: cannot be populated.
        return madvise(reinterpret_cast<void*>(first), start + len - first, MADV_POPULATE_WRITE) == 0;
    }
#endif
    return odp_readable(addr, len);
}

bool odp_write(void* dst, const void* src, size_t n)
{
    if (n == 0) return true;
    iovec local{const_cast<void*>(src), n};
    iovec remote{dst, n};
    return process_vm_writev(getpid(), &local, 1, &remote, 1, 0) == static_cast<ssize_t>(n);
}

int odp_prefetch(const void* addr, uint64_t len, bool for_write)
{
    if (len == 0) return 0;
    if (!odp_readable(addr, len)) return EFAULT;
    const uintptr_t ps = page_size();
    const uintptr_t start = reinterpret_cast<uintptr_t>(addr) & ~(ps - 1);
    const uintptr_t end = reinterpret_cast<uintptr_t>(addr) + len;
    // Populating for write breaks copy-on-write ahead of the placement, as an
    // RNIC's prefetch maps the pages writable; older kernels lack it: a hint.
#ifdef MADV_POPULATE_WRITE
    if (for_write && madvise(reinterpret_cast<void*>(start), end - start, MADV_POPULATE_WRITE) == 0) return 0;
#else
    (void)for_write;
#endif
    (void)madvise(reinterpret_cast<void*>(start), end - start, MADV_WILLNEED);
    return 0;
}

}  // namespace iwemu
