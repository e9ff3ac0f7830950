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
//
// Memory Windows (RFC 5040 §2.1, IBA 10.6.7) live in the same index space:
// a window slot has its own STag, rights and range and names the region it
// is bound to.  A tagged access through a window pins the window only while
// acquire() checks it and hands back the underlying region, pinned: the
// data path then works on the region exactly as for a region's own STag,
// and a window can be rebound or invalidated at any time without waiting
// for data in flight.  A region costs one byte test more on acquire.
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

// A table slot: a Memory Region, or the STag part of a Memory Window.
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
    // Hot fields first, the window's cold ones last; the window's 32-bit
    // fields sit in what was padding (a region's entry grew by 16 octets).
    std::atomic<State> state_{State::free};
    uint8_t window_ = 0;  // 0: a region; 1 or 2: a window of that type (then pd/access/iova/length are its own)
    std::atomic<uint32_t> users_{0};
    uint32_t stag_ = 0;
    uint32_t bound_stag_ = 0;  // window: its region's STag when bound (a slot re-registered since has a new key)
    uint8_t* host_ = nullptr;
    uint64_t iova_ = 0;
    uint64_t length_ = 0;
    uint32_t access_ = 0;
    std::atomic<uint32_t> windows_{0};  // region: windows bound to it
    ProtectionDomain* pd_ = nullptr;
    MemoryRegion* bound_ = nullptr;  // window: the region it is bound to
    uint64_t stream_ = 0;            // type 2 window: the stream (QP) it is associated with
};

// ibv_alloc_mw's object: the window's slot in the table, its type and PD.
class MemoryWindow {
public:
    MwType type() const { return type_; }
    ProtectionDomain* pd() const { return pd_; }
    // The window's STag now: a bind gives it a new key (same index).
    uint32_t rkey() const { return slot_->stag(); }
    // Bound and not invalidated: remote access through rkey() may succeed.
    bool valid() const { return slot_->valid(); }
    // Its table entry, which outlives it: a bind WR queued for the window
    // names the entry, so a window freed meanwhile fails the bind (the
    // entry is free, or has another key) instead of touching freed memory.
    MemoryRegion* entry() const { return slot_; }

    void* user_context = nullptr;  // free for the provider / shim

private:
    friend class StagTable;
    MemoryWindow(MemoryRegion* slot, MwType type, ProtectionDomain* pd) : slot_(slot), type_(type), pd_(pd) {}
    MemoryRegion* const slot_;
    const MwType type_;
    ProtectionDomain* const pd_;
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
    // At most max_regions regions and max_windows windows at a time.
    explicit StagTable(uint32_t max_regions, uint32_t key_seed = 0, uint32_t max_windows = 0);
    ~StagTable();
    StagTable(const StagTable&) = delete;
    StagTable& operator=(const StagTable&) = delete;

    // ENOMEM when the table is full.
    int register_region(ProtectionDomain* pd, void* addr, uint64_t length, uint64_t iova, uint32_t access,
                        MemoryRegion** out);
    // Invalidate, wait until no data path user holds it, free the slot.
    // EINVAL while windows are bound to it (IBA 10.6.7.2.6, as rxe).
    int deregister(MemoryRegion* mr);
    // ibv_rereg_mr: the same STag now names new memory, PD or rights.  The
    // entry is invalid while it changes (a tagged access meanwhile fails as
    // with an unknown STag) and no data path user holds the old values after.
    // EINVAL while windows are bound to it.
    int reregister(MemoryRegion* mr, ProtectionDomain* pd, void* addr, uint64_t length, uint64_t iova,
                   uint32_t access);

    // ---- Memory Windows (memory_window.cpp) ----
    // A window slot, unbound (type 1 and 2 alike: no access until a bind).
    // ENOMEM when max_windows are allocated or the table is full.
    int allocate_window(ProtectionDomain* pd, MwType type, MemoryWindow** out);
    // Invalidates (unbinding it from its region) and frees the slot.
    void free_window(MemoryWindow* mw);
    // Executes a Bind Memory Window work request of a QP of PD `qp_pd` and
    // stream `stream`.  0, or why it failed (the WR completes with
    // mw_bind_err): EINVAL wrong key index, type 2 not free, no MR / length
    // for type 2, range outside the MR, zero-based, MR not valid; EPERM PD
    // mismatch; EACCES MR without MW_BIND, or remote write/atomic rights
    // over an MR without local write (IBA C10-73, C10-74).  A type 1 bind
    // without MR or length unbinds.  Nothing changes when it fails.
    // `window` is bind.mw->entry() taken when the WR was posted (bind.mw is not read).
    int bind_window(MemoryRegion* window, const MwBind& bind, const ProtectionDomain* qp_pd, uint64_t stream);
    uint32_t windows() const { return live_windows_.load(std::memory_order_relaxed); }

    // Data path: pin the entry named by `stag` if it is valid and every check
    // passes (PD, access bits all present, [to, to+len) in bounds).  On
    // success the caller must release().  len 0 checks nothing but validity.
    // A window's STag gives its region (pinned), and only for remote access
    // (a window is no local key), only on its stream for a type 2 window
    // (pd_mismatch otherwise: "not associated with the stream").  stream 0:
    // none (local access).
    MemoryRegion* acquire(uint32_t stag, const ProtectionDomain* pd, uint32_t access, uint64_t to, uint64_t len,
                          StagError* error, uint64_t stream = 0);
    static void release(MemoryRegion* mr) { mr->users_.fetch_sub(1, std::memory_order_release); }

    // Local Invalidate / Send with Invalidate (RFC 5040 §5.3, §7.2): only a
    // valid STag of the same PD.  Returns none, invalid_stag or pd_mismatch.
    // A window: type 2 only (IBA o10-37.2.26; a type 1 window is
    // invalid_stag), and a remote invalidation (remote_stream != 0) only on
    // the window's own stream.  The window is unbound from its region.
    StagError invalidate(uint32_t stag, const ProtectionDomain* pd, uint64_t remote_stream = 0);

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
    int allocate_slot(MemoryRegion** out);  // alloc_lock_ held
    uint8_t next_key(uint8_t previous);     // alloc_lock_ held
    MemoryRegion* acquire_window(MemoryRegion* w, const ProtectionDomain* pd, uint32_t access, uint64_t to,
                                 uint64_t len, StagError* error, uint64_t stream);
    StagError invalidate_window(MemoryRegion* w, uint32_t stag, const ProtectionDomain* pd, uint64_t remote_stream);
    void quiesce_window(MemoryRegion* w, MemoryRegion::State to);  // window_lock_ held
    void unbind_locked(MemoryRegion* w);    // window_lock_ held

    const uint32_t max_entries_;
    const uint32_t max_regions_;
    const uint32_t max_windows_;
    std::vector<std::atomic<MemoryRegion*>> chunks_;  // chunk pointers, filled on demand, freed at exit
    std::mutex alloc_lock_;
    std::vector<uint32_t> free_indexes_;
    uint32_t next_fresh_ = 1;  // index 0 is never used: STag 0 is special for some RNICs
    uint32_t key_seed_;
    std::atomic<uint32_t> live_{0};
    std::atomic<uint32_t> live_windows_{0};
    // Binds, unbinds and window invalidations, and a region's dereg/rereg
    // against them (control path only; acquire() never takes it).
    std::mutex window_lock_;
};

}  // namespace iwemu
