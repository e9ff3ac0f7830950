// How payload reaches application memory: every octet written once, and the
// last octets in ascending order, the last one last.
//
// Applications poll the last octet of a buffer an RDMA Write fills, then
// write into that same buffer (riostream's ping-pong marks its turn there;
// perftest's write_lat polls the last octet).  An RNIC's DMA writes each
// octet once, in order.  memcpy does not promise that: glibc's vector
// copies of 33..128 octets store overlapping vectors, so an octet can be
// written twice, and a poller that saw the first store and wrote its own
// value had that value overwritten by the second (riostream's default run
// hung, each side waiting for a marker the other had overwritten).  So the
// tail of every placement is written by 8-octet and 1-octet stores in
// ascending order that the compiler may not merge back into a memcpy call;
// the bulk before it, which no poller waits on, still goes through memcpy.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <cstring>

namespace iwemu {

inline constexpr size_t placement_ordered_tail = 64;

inline void placement_copy(void* dst, const void* src, size_t n)
{
    auto* d = static_cast<uint8_t*>(dst);
    const auto* s = static_cast<const uint8_t*>(src);
    if (n > placement_ordered_tail) {
        const size_t bulk = n - placement_ordered_tail;
        std::memcpy(d, s, bulk);
        d += bulk;
        s += bulk;
        n = placement_ordered_tail;
    }
    if (n == 0) return;
    // Everything before the last octet is visible no later than it (a
    // compiler barrier on x86, a store-store barrier elsewhere).
    size_t i = 0;
    for (; i + 8 < n; i += 8) {
        uint64_t w;
        std::memcpy(&w, s + i, 8);
        std::memcpy(d + i, &w, 8);
        asm volatile("" ::: "memory");  // one store each: no memcpy call, no overlap
    }
    for (; i + 1 < n; ++i) {
        d[i] = s[i];
        asm volatile("" ::: "memory");
    }
    std::atomic_thread_fence(std::memory_order_release);
    d[n - 1] = s[n - 1];
}

}  // namespace iwemu
