#include "emulator/stag_table.h"

#include <cerrno>
#include <random>
#include <thread>

#include "emulator/pd.h"

namespace iwemu {

StagTable::StagTable(uint32_t max_entries, uint32_t key_seed)
    : max_entries_(max_entries), chunks_((max_entries + chunk_size) / chunk_size)
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

int StagTable::register_region(ProtectionDomain* pd, void* addr, uint64_t length, uint64_t iova, uint32_t access,
                               MemoryRegion** out)
{
    std::lock_guard<std::mutex> g(alloc_lock_);
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
    MemoryRegion* mr = slot(index);
    // A fresh 8-bit key per registration: a stale STag of the previous owner
    // of this index no longer matches (RFC 5040 §2.1 "STag key").
    key_seed_ = key_seed_ * 1103515245u + 12345u;
    uint8_t key = static_cast<uint8_t>(key_seed_ >> 16);
    if (key == static_cast<uint8_t>(mr->stag_)) ++key;
    mr->stag_ = index << 8 | key;
    mr->host_ = static_cast<uint8_t*>(addr);
    mr->iova_ = iova;
    mr->length_ = length;
    mr->access_ = access;
    mr->pd_ = pd;
    mr->users_.store(0, std::memory_order_relaxed);
    mr->state_.store(MemoryRegion::State::valid, std::memory_order_release);
    live_.fetch_add(1, std::memory_order_relaxed);
    *out = mr;
    return 0;
}

void StagTable::deregister(MemoryRegion* mr)
{
    mr->state_.store(MemoryRegion::State::free, std::memory_order_seq_cst);
    // The data path pins before it re-checks the state, so once users is 0
    // after the store above nobody can still touch the memory.
    while (mr->users_.load(std::memory_order_seq_cst) != 0) std::this_thread::yield();
    std::lock_guard<std::mutex> g(alloc_lock_);
    free_indexes_.push_back(mr->stag_ >> 8);
    live_.fetch_sub(1, std::memory_order_relaxed);
}

void StagTable::reregister(MemoryRegion* mr, ProtectionDomain* pd, void* addr, uint64_t length, uint64_t iova,
                           uint32_t access)
{
    // invalid, not free: the slot must not be handed to another registration.
    mr->state_.store(MemoryRegion::State::invalid, std::memory_order_seq_cst);
    while (mr->users_.load(std::memory_order_seq_cst) != 0) std::this_thread::yield();
    mr->host_ = static_cast<uint8_t*>(addr);
    mr->iova_ = iova;
    mr->length_ = length;
    mr->access_ = access;
    mr->pd_ = pd;
    mr->state_.store(MemoryRegion::State::valid, std::memory_order_release);
}

MemoryRegion* StagTable::acquire(uint32_t stag, const ProtectionDomain* pd, uint32_t access, uint64_t to,
                                 uint64_t len, StagError* error)
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

StagError StagTable::invalidate(uint32_t stag, const ProtectionDomain* pd)
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
    else if (mr->pd_ != pd)
        e = StagError::pd_mismatch;
    else if (!mr->state_.compare_exchange_strong(expected, MemoryRegion::State::invalid))
        e = StagError::invalid_stag;
    mr->users_.fetch_sub(1, std::memory_order_release);
    return e;
}

}  // namespace iwemu
