// Memory Regions and the STag table.
//
// STag = 24-bit index ‖ 8-bit key (RFC 5040 §2.1 leaves the layout to the
// RNIC; this is the siw/verbs convention: lkey == rkey == STag).  Lookup on
// the receive path is O(1) and lock-free: entries live in fixed chunks that
// are never freed while the emulator exists, so a stale STag can always be
// read safely and is rejected by its key or its state.  A user count pins an
// entry while the data path places into (or gathers from) its memory;
// deregistration invalidates first, then waits for the count to drain.
// Registration is O(1) in the region size: nothing is pinned or walked.
#pragma once

#include <array>
#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <vector>

#include "emulator/verbs_types.h"

namespace iwemu {

class ProtectionDomain;

class MemoryRegion {
public:
    uint32_t lkey() const { return stag_; }
    uint32_t rkey() const { return stag_; }
    uint32_t stag() const { return stag_; }
    uint64_t iova() const { return iova_; }     // Tagged Offset of the first octet
    uint64_t length() const { return length_; }
    uint32_t access() const { return access_; }
    void* addr() const { return host_; }
    ProtectionDomain* pd() const { return pd_; }
    bool valid() const { return state_.load(std::memory_order_acquire) == State::valid; }

    void* user_context = nullptr;  // free for the provider / shim

    // Pointer to the octet at Tagged Offset `to`; caller has checked bounds.
    // Integer arithmetic: the implicit ODP region's host_ is null.
    uint8_t* at(uint64_t to) const
    {
        return reinterpret_cast<uint8_t*>(reinterpret_cast<uintptr_t>(host_) + (to - iova_));
    }
    // [to, to+len) inside the region, without 64-bit wrap.
    bool contains(uint64_t to, uint64_t len) const
    {
        return to >= iova_ && len <= length_ && to - iova_ <= length_ - len;
    }

private:
    friend class StagTable;
    enum class State : uint8_t { free, valid, invalid };
    std::atomic<State> state_{State::free};
    std::atomic<uint32_t> users_{0};
    uint32_t stag_ = 0;
    uint8_t* host_ = nullptr;
    uint64_t iova_ = 0;
    uint64_t length_ = 0;
    uint32_t access_ = 0;
    ProtectionDomain* pd_ = nullptr;
};

// Why a lookup failed (mapped to Terminate codes by the caller, per layer).
enum class StagError : uint8_t {
    none,
    invalid_stag,     // unknown index, wrong key, or invalidated
    pd_mismatch,      // STag not associated with this stream
    access,           // right missing
    bounds,           // outside [iova, iova+length)
    to_wrap,          // TO + length overflows 64 bits
};

class StagTable {
public:
    static constexpr uint32_t chunk_size = 4096;

    // key_seed 0: random keys (normal); otherwise a fixed sequence (tests).
    explicit StagTable(uint32_t max_entries, uint32_t key_seed = 0);
    ~StagTable();
    StagTable(const StagTable&) = delete;
    StagTable& operator=(const StagTable&) = delete;

    // ENOMEM when the table is full.
    int register_region(ProtectionDomain* pd, void* addr, uint64_t length, uint64_t iova, uint32_t access,
                        MemoryRegion** out);
    // Invalidate, wait until no data path user holds it, free the slot.
    void deregister(MemoryRegion* mr);
    // ibv_rereg_mr: the same STag now names new memory, PD or rights.  The
    // entry is invalid while it changes (a tagged access meanwhile fails as
    // with an unknown STag) and no data path user holds the old values after.
    void reregister(MemoryRegion* mr, ProtectionDomain* pd, void* addr, uint64_t length, uint64_t iova,
                    uint32_t access);

    // Data path: pin the entry named by `stag` if it is valid and every check
    // passes (PD, access bits all present, [to, to+len) in bounds).  On
    // success the caller must release().  len 0 checks nothing but validity.
    MemoryRegion* acquire(uint32_t stag, const ProtectionDomain* pd, uint32_t access, uint64_t to, uint64_t len,
                          StagError* error);
    static void release(MemoryRegion* mr) { mr->users_.fetch_sub(1, std::memory_order_release); }

    // Local Invalidate / Send with Invalidate (RFC 5040 §5.3, §7.2): only a
    // valid STag of the same PD.  Returns none, invalid_stag or pd_mismatch.
    StagError invalidate(uint32_t stag, const ProtectionDomain* pd);

    uint32_t registered() const { return live_.load(std::memory_order_relaxed); }

    // The valid regions, in index order (resource_snapshot.cpp; not the data path).
    template <typename F>
    void for_each_valid(F&& f)
    {
        std::lock_guard<std::mutex> g(alloc_lock_);
        for (uint32_t i = 1; i < next_fresh_; ++i)
            if (const MemoryRegion* mr = slot(i); mr && mr->valid()) f(*mr);
    }

private:
    MemoryRegion* slot(uint32_t index) const;

    const uint32_t max_entries_;
    std::vector<std::atomic<MemoryRegion*>> chunks_;  // chunk pointers, filled on demand, freed at exit
    std::mutex alloc_lock_;
    std::vector<uint32_t> free_indexes_;
    uint32_t next_fresh_ = 1;  // index 0 is never used: STag 0 is special for some RNICs
    uint32_t key_seed_;
    std::atomic<uint32_t> live_{0};
};

}  // namespace iwemu
