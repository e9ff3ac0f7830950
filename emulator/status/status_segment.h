// The status segment: one shared-memory file per process that uses iwemu,
// $XDG_RUNTIME_DIR/iwemu/status/<pid>.shm (or /tmp/iwemu-<uid>/status/),
// directory 0700, file 0600.  A fixed header names the process; a table of
// slots holds each live QP's number, state, addresses and counters, which
// the QP updates in place (qp_counters.h).  Readers in other processes of
// the same user map it read-only (status_reader.h): one view of every
// iwemu process for `iwemu status` and the `rdma` tool, with no server
// thread and nothing added to the data path.
#pragma once

#include <sys/socket.h>

#include <atomic>
#include <cstdint>
#include <string>

#include "emulator/qp_counters.h"
#include "emulator/verbs_types.h"

namespace iwemu {

inline constexpr uint64_t kStatusMagic = 0x3174'6174'5355'4557ull;  // "WEUStat1"
inline constexpr uint32_t kStatusVersion = 1;
inline constexpr uint32_t kStatusSlots = 4096;  // sparse: a page is touched only when its slots are

// An address written once when the connection attaches; words, so that a
// racing reader never tears a byte (it rechecks the slot's generation).
struct StatusAddress {
    std::atomic<uint64_t> w[3]{};  // w[0]: family | port (host order) << 16; w[1..2]: address bytes
    void store(const sockaddr_storage& a);
    sockaddr_storage load() const;
};

// Cache-line aligned: a QP's counters share no line with another QP's.
struct alignas(64) QpStatusSlot {
    // Odd: a live QP owns the slot; even: free.  Changed only by the owning
    // process under its publisher lock, with release order.
    std::atomic<uint32_t> generation{0};
    std::atomic<uint32_t> qp_num{0};
    std::atomic<QpState> state{QpState::reset};  // the QP's own state variable
    uint32_t reserved = 0;
    StatusAddress local, peer;
    QpCounters counters;
};

struct alignas(64) StatusHeader {
    std::atomic<uint64_t> magic{0};  // kStatusMagic, stored last (release)
    uint32_t version = kStatusVersion;
    uint32_t header_size = sizeof(StatusHeader);
    uint32_t slot_size = sizeof(QpStatusSlot);
    uint32_t slot_count = kStatusSlots;
    uint32_t pid = 0;
    uint32_t reserved = 0;
    uint64_t start_time = 0;  // /proc/<pid>/stat starttime: tells a reused pid apart
    char comm[16] = {};
    char device[32] = {};
    QpCounters retired;       // sums of the counters of the process's destroyed QPs
};

static_assert(sizeof(StatusHeader) % 64 == 0 && sizeof(QpStatusSlot) % 64 == 0);

inline constexpr size_t kStatusFileSize = sizeof(StatusHeader) + size_t{kStatusSlots} * sizeof(QpStatusSlot);

// The directory of the status files, created 0700 (and its parent) when
// `create`; "" with *error set when no private directory can be had.
std::string status_directory(bool create, std::string* error);

// starttime of /proc/<pid>/stat (field 22); 0 when unreadable.
uint64_t process_start_time(uint32_t pid);

}  // namespace iwemu
