// Per-QP counters.  They live in the QP's slot of the process's status
// segment (status_segment.h), so other processes (`iwemu status`, the
// netlink answers of `rdma statistic`) read them where the data path
// writes them: no copy, no lock, no system call.
#pragma once

#include <atomic>
#include <cstdint>

namespace iwemu {

struct QpCounters {
    std::atomic<uint64_t> tx_fpdus{0};
    std::atomic<uint64_t> tx_bytes{0};
    std::atomic<uint64_t> rx_fpdus{0};
    std::atomic<uint64_t> rx_bytes{0};
    std::atomic<uint64_t> tx_syscalls{0};
    std::atomic<uint64_t> rx_syscalls{0};
    std::atomic<uint64_t> rx_copied_bytes{0};  // payload octets that went through the staging buffer
    std::atomic<uint64_t> rx_rnr_waits{0};     // Sends that found no receive posted and waited for one
    std::atomic<uint64_t> rx_engine_passes{0}; // receive passes the engine thread ran on EPOLLIN
    std::atomic<uint64_t> rx_poll_lease_lapses{0};  // poll ownership handed back by the engine's lease tick
    std::atomic<uint64_t> fin_stall_drops{0};  // graceful closes dropped: the peer's closed window held the FIN back
    std::atomic<uint64_t> rx_post_assists{0};  // receive passes a posting thread ran (rx_post_assist.cpp)
    std::atomic<uint64_t> tx_wakeups{0};       // zero-length Writes that woke a peer up (first_fpdus.cpp)
    std::atomic<uint64_t> rx_crc_errors{0};    // FPDUs whose MPA CRC did not match (the Terminate's cause)
    // Terminates by layer, indexed by wire::TerminateLayer (0 RDMAP, 1 DDP, 2 LLP/MPA).
    std::atomic<uint64_t> terminates_sent[3]{};
    std::atomic<uint64_t> terminates_received[3]{};
    std::atomic<uint64_t> rx_read_requests{0};   // inbound Read Requests queued for an answer
    std::atomic<uint64_t> tx_read_responses{0};  // of those, answered (their last Read Response framed)
    std::atomic<uint64_t> rx_reads_over_ird{0};  // inbound Read Requests beyond the IRD (RDMAP-023)
    std::atomic<uint64_t> faults_fired{0};       // fault-injection rules that fired on this QP (IWEMU_FAULTS)
};

// Each counter has one writer at a time, serialized by the lock of its
// path (rx_lock_ or sq_lock_), and readers only look: a plain relaxed
// store, not a locked read-modify-write per packet and per empty read.
inline void count(std::atomic<uint64_t>& counter, uint64_t n = 1)
{
    counter.store(counter.load(std::memory_order_relaxed) + n, std::memory_order_relaxed);
}

}  // namespace iwemu
