#include "kmod-shim/fd_table.h"

#include <atomic>
#include <mutex>
#include <unordered_map>

namespace iwemu::shim {
namespace {

constexpr int kDirectFds = 1 << 16;

// kind in the low byte, device in the next one; 0 = not ours.
std::atomic<uint16_t> g_direct[kDirectFds];

std::mutex g_overflow_mutex;
std::atomic<size_t> g_overflow_size{0};  // lets write() on a high fd skip the mutex when none is ours
std::unordered_map<int, FdEntry>& overflow()
{
    static auto* map = new std::unordered_map<int, FdEntry>;  // never destroyed: used from late close()
    return *map;
}

uint16_t pack(FdEntry e) { return static_cast<uint16_t>(static_cast<uint16_t>(e.kind) | (e.device << 8)); }
FdEntry unpack(uint16_t v) { return {static_cast<FdKind>(v & 0xff), static_cast<uint8_t>(v >> 8)}; }

}  // namespace

void fd_table_set(int fd, FdEntry entry)
{
    if (fd < 0) return;
    if (fd < kDirectFds) {
        g_direct[fd].store(pack(entry), std::memory_order_release);
        return;
    }
    std::lock_guard lock(g_overflow_mutex);
    overflow()[fd] = entry;
    g_overflow_size.store(overflow().size(), std::memory_order_release);
}

FdEntry fd_table_get(int fd)
{
    if (fd < 0) return {};
    if (fd < kDirectFds) return unpack(g_direct[fd].load(std::memory_order_acquire));
    if (g_overflow_size.load(std::memory_order_acquire) == 0) return {};
    std::lock_guard lock(g_overflow_mutex);
    auto it = overflow().find(fd);
    return it == overflow().end() ? FdEntry{} : it->second;
}

void fd_table_clear(int fd)
{
    if (fd < 0) return;
    if (fd < kDirectFds) {
        g_direct[fd].store(0, std::memory_order_release);
        return;
    }
    std::lock_guard lock(g_overflow_mutex);
    overflow().erase(fd);
    g_overflow_size.store(overflow().size(), std::memory_order_release);
}

}  // namespace iwemu::shim
