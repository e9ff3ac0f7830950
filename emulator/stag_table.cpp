#include "emulator/stag_table.h"

#include <cerrno>
#include <random>
#include <thread>

#include "emulator/pd.h"

namespace iwemu {

StagTable::StagTable(uint32_t max_regions, uint32_t key_seed, uint32_t max_windows)
    : max_entries_(max_regions + max_windows),
      max_regions_(max_regions),
      max_windows_(max_windows),
      chunks_((max_regions + max_windows + chunk_size) / chunk_size)
{
    // Keys start at a random point so STags differ from run to run
    // (RFC 5040 §8.1.1: STags should be hard to predict).
    std::random_device rd;
    key_seed_ = key_seed ? key_seed : rd();
    for (auto& c : chunks_) c.store(nullptr, std::memory_order_relaxed);
}

StagTable::~StagTable()
{
    for (auto& c : chunks_) delete[] c.load(std::memory_order_relaxed);
}

MemoryRegion* StagTable::slot(uint32_t index) const
{
    const uint32_t chunk = index / chunk_size;
    if (chunk >= chunks_.size()) return nullptr;
    MemoryRegion* base = chunks_[chunk].load(std::memory_order_acquire);
    return base ? base + index % chunk_size : nullptr;
}

int StagTable::allocate_slot(MemoryRegion** out)
{
    // alloc_lock_ held.  The slot's STag gets its index and a fresh key.
    uint32_t index;
    if (!free_indexes_.empty()) {
        index = free_indexes_.back();
        free_indexes_.pop_back();
    } else {
        if (next_fresh_ > max_entries_ || next_fresh_ >= (1u << 24)) return ENOMEM;
        index = next_fresh_++;
        const uint32_t chunk = index / chunk_size;
        if (!chunks_[chunk].load(std::memory_order_relaxed))
            chunks_[chunk].store(new MemoryRegion[chunk_size], std::memory_order_release);
    }
    MemoryRegion* m = slot(index);
    m->stag_ = index << 8 | next_key(static_cast<uint8_t>(m->stag_));
    *out = m;
    return 0;
}

// A fresh 8-bit key per registration: a stale STag of the previous owner
// of an index no longer matches (RFC 5040 §2.1 "STag key").
uint8_t StagTable::next_key(uint8_t previous)
{
    key_seed_ = key_seed_ * 1103515245u + 12345u;
    uint8_t key = static_cast<uint8_t>(key_seed_ >> 16);
    if (key == previous) ++key;
    return key;
}

int StagTable::register_region(ProtectionDomain* pd, void* addr, uint64_t length, uint64_t iova, uint32_t access,
                               MemoryRegion** out)
{
    std::lock_guard<std::mutex> g(alloc_lock_);
    if (live_.load(std::memory_order_relaxed) >= max_regions_) return ENOMEM;
    MemoryRegion* mr;
    if (int err = allocate_slot(&mr)) return err;
    mr->window_ = 0;
    mr->host_ = static_cast<uint8_t*>(addr);
    mr->iova_ = iova;
    mr->length_ = length;
    mr->access_ = access;
    mr->pd_ = pd;
    mr->bound_ = nullptr;
    mr->stream_ = 0;
    mr->windows_.store(0, std::memory_order_relaxed);
    mr->users_.store(0, std::memory_order_relaxed);
    mr->state_.store(MemoryRegion::State::valid, std::memory_order_release);
    live_.fetch_add(1, std::memory_order_relaxed);
    *out = mr;
    return 0;
}

int StagTable::deregister(MemoryRegion* mr)
{
    {
        // Under window_lock_: no bind can take the region between the check and the store.
        std::lock_guard<std::mutex> w(window_lock_);
        if (mr->window_ || mr->windows_.load(std::memory_order_relaxed) != 0) return EINVAL;
        mr->state_.store(MemoryRegion::State::free, std::memory_order_seq_cst);
    }
    // The data path pins before it re-checks the state, so once users is 0
    // after the store above nobody can still touch the memory.
    while (mr->users_.load(std::memory_order_seq_cst) != 0) std::this_thread::yield();
    std::lock_guard<std::mutex> g(alloc_lock_);
    free_indexes_.push_back(mr->stag_ >> 8);
    live_.fetch_sub(1, std::memory_order_relaxed);
    return 0;
}

int StagTable::reregister(MemoryRegion* mr, ProtectionDomain* pd, void* addr, uint64_t length, uint64_t iova,
                          uint32_t access)
{
    std::lock_guard<std::mutex> w(window_lock_);
    // A bound window's range was checked against the current memory.
    if (mr->window_ || mr->windows_.load(std::memory_order_relaxed) != 0) return EINVAL;
    // invalid, not free: the slot must not be handed to another registration.
    mr->state_.store(MemoryRegion::State::invalid, std::memory_order_seq_cst);
    while (mr->users_.load(std::memory_order_seq_cst) != 0) std::this_thread::yield();
    mr->host_ = static_cast<uint8_t*>(addr);
    mr->iova_ = iova;
    mr->length_ = length;
    mr->access_ = access;
    mr->pd_ = pd;
    mr->state_.store(MemoryRegion::State::valid, std::memory_order_release);
    return 0;
}

MemoryRegion* StagTable::acquire(uint32_t stag, const ProtectionDomain* pd, uint32_t access, uint64_t to,
                                 uint64_t len, StagError* error, uint64_t stream)
{
    MemoryRegion* mr = slot(stag >> 8);
    if (!mr) {
        *error = StagError::invalid_stag;
        return nullptr;
    }
    mr->users_.fetch_add(1, std::memory_order_seq_cst);
    StagError e = StagError::none;
    if (mr->state_.load(std::memory_order_seq_cst) != MemoryRegion::State::valid || mr->stag_ != stag)
        e = StagError::invalid_stag;
    else if (mr->window_) [[unlikely]]
        return acquire_window(mr, pd, access, to, len, error, stream);
    else if (mr->pd_ != pd)
        e = StagError::pd_mismatch;
    else if ((mr->access_ & access) != access)
        e = StagError::access;
    else if (len > 0 && to + len < to)
        e = StagError::to_wrap;
    else if (len > 0 && !mr->contains(to, len))
        e = StagError::bounds;
    if (e != StagError::none) {
        mr->users_.fetch_sub(1, std::memory_order_release);
        *error = e;
        return nullptr;
    }
    *error = StagError::none;
    return mr;
}

StagError StagTable::invalidate(uint32_t stag, const ProtectionDomain* pd, uint64_t remote_stream)
{
    MemoryRegion* mr = slot(stag >> 8);
    if (!mr) return StagError::invalid_stag;
    // Pin while looking, exactly as acquire(): the slot cannot be recycled
    // under us.  Only a valid STag with the right key goes to invalid; the
    // slot stays allocated until dereg_mr.
    mr->users_.fetch_add(1, std::memory_order_seq_cst);
    StagError e = StagError::none;
    auto expected = MemoryRegion::State::valid;
    if (mr->state_.load(std::memory_order_seq_cst) != MemoryRegion::State::valid || mr->stag_ != stag)
        e = StagError::invalid_stag;
    else if (mr->window_) {
        // Unpinned first: a bind holds window_lock_ while it waits for pins to drain.
        mr->users_.fetch_sub(1, std::memory_order_release);
        return invalidate_window(mr, stag, pd, remote_stream);
    } else if (mr->pd_ != pd)
        e = StagError::pd_mismatch;
    else if (!mr->state_.compare_exchange_strong(expected, MemoryRegion::State::invalid))
        e = StagError::invalid_stag;
    mr->users_.fetch_sub(1, std::memory_order_release);
    return e;
}

}  // namespace iwemu
