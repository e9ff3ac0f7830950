// The QP's receive path: the FPDU receiver and its staging buffer, the
// segment in progress (DDP header, RDMAP control octets, placement target),
// the untagged Send in progress with its receive WQE, and the per-QN MSNs.
// Its members in this order are the ones every inbound FPDU touches.
//
// Guarded by QueuePair::rx_lock_ (one receiver at a time).  Driven by
// rx_engine.cpp, immediate_data.cpp and atomics.cpp (inbound requests and
// responses); qp.cpp sets it up at attach and flushes it, local_peer.cpp
// reads stream_read.
#pragma once

#include <sys/uio.h>

#include <array>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <new>
#include <type_traits>
#include <utility>
#include <vector>

#include "emulator/config.h"
#include "emulator/recv_queue.h"
#include "emulator/verbs_types.h"
#include "emulator/wire/ddp_header.h"
#include "emulator/wire/fpdu_receiver.h"

namespace iwemu {

// Leaves elements default-initialised (octets: not written at all), so a
// large buffer costs resident memory only for the pages actually used: a
// thousand idle QPs must not each hold a zeroed 64 KiB receive staging area.
template <typename T>
struct DefaultInitAllocator : std::allocator<T> {
    template <typename U>
    struct rebind {
        using other = DefaultInitAllocator<U>;
    };
    template <typename U>
    void construct(U* p) noexcept(std::is_nothrow_default_constructible_v<U>)
    {
        ::new (static_cast<void*>(p)) U;
    }
    template <typename U, typename... Args>
    void construct(U* p, Args&&... args)
    {
        ::new (static_cast<void*>(p)) U(std::forward<Args>(args)...);
    }
};

struct ReceivePath {
    enum class RxTarget : uint8_t { none, discard, user, control };
    static constexpr size_t rx_staging_size = 64 * 1024;
    static_assert(rx_staging_size >= rx_lookahead_max, "a look-ahead read lands in staging");
    static constexpr size_t rx_control_max = 128;  // RDMAP header octets we keep (Read Request, Terminate, ...)
    static constexpr uint32_t rx_copy_max = 8192;  // larger segments: header read, then payload readv'd in place
    static constexpr int rx_read_budget = 64;       // socket reads per progress call

    wire::FpduReceiver fpdu;
    std::vector<uint8_t, DefaultInitAllocator<uint8_t>> staging;  // pages become resident as reads fill them
    size_t pos = 0, end = 0;
    size_t read_hint = 8192;
    size_t lookahead = rx_lookahead_min;  // staging tail of a direct readv (Config::rx_lookahead)
    uint32_t prev_plen = 0;        // payload octets of the segment before the last (read_hint)
    bool dead = false;             // error seen: drain and drop, place nothing
    uint32_t msn[4] = {1, 1, 1, 1};  // next expected MSN per QN
    RxTarget target = RxTarget::none;
    std::array<iovec, recv_wqe_max_sge + 1> dest{};  // placement target of this segment's payload
    int dest_count = 0;
    bool dest_odp = false;         // dest lies in an ODP region: fault-safe placement
    bool odp_fault = false;        // ... and a copy into it faulted
    bool wqe_odp = false;          // wqe's buffers are in an ODP region
    std::array<uint8_t, wire::ddp_untagged_header_size + rx_control_max> control{};  // DDP hdr + RDMAP hdr
    size_t control_len = 0;
    wire::DdpHeader hdr{};          // the current segment's DDP header
    uint8_t opcode = 0;
    uint32_t plen = 0;             // payload octets of the current segment
    uint16_t ulen = 0;             // its ULPDU_Length
    // Untagged QN 0 message in progress
    bool send_active = false;
    RecvWqe wqe{};
    // The RQ's next WQE, prefetched by every empty read: it was written a
    // queue depth of messages ago and is out of cache by the time its Send
    // arrives (a miss of ~100 ns on the receive path of every message).
    const RecvWqe* wqe_next = nullptr;
    std::array<uint64_t, recv_wqe_max_sge> wqe_host_delta{};
    WcStatus wqe_status = WcStatus::success;  // set when the message in progress failed locally
    uint64_t send_placed = 0;
    bool rtr_absorb = false;       // the current segment is the peer's RTR
    MemoryRegion* mr = nullptr;    // pinned target of the current tagged segment
    bool tx_kick = false;          // this receive pass made TX work (rx_kick_tx after unlocking)
    // RFC 7306 (immediate_data.cpp)
    uint64_t write_len = 0;        // octets of the latest inbound RDMA Write message
    bool write_open = false;       // its last segment (L = 1) not seen yet
    // local_peer.cpp: stream octets read from the socket since attach, from
    // the first FPDU octet.
    uint64_t stream_read = 0;
};

}  // namespace iwemu
