// Receive work queue element storage shared by the RQ of a QP and the SRQ:
// a ring sized at creation, SGEs stored inline (no allocation when posting).
#pragma once

#include <cstdint>
#include <vector>

#include "emulator/verbs_types.h"

namespace iwemu {

inline constexpr uint32_t recv_wqe_max_sge = 16;

struct RecvWqe {
    uint64_t wr_id = 0;
    uint32_t num_sge = 0;
    uint64_t total_length = 0;
    Sge sge[recv_wqe_max_sge];
};

class RecvRing {
public:
    void init(uint32_t capacity, uint32_t max_sge)
    {
        slots_.assign(capacity, RecvWqe{});
        capacity_ = capacity;
        max_sge_ = max_sge;
        head_ = count_ = 0;
    }
    // EINVAL: too many SGEs; ENOMEM: ring full.
    int push(const RecvWr& wr)
    {
        if (wr.num_sge > max_sge_ || (wr.num_sge && !wr.sg_list))
            return 22;  // EINVAL
        if (count_ == capacity_)
            return 12;  // ENOMEM, as siw
        uint32_t tail = head_ + count_;
        if (tail >= capacity_) tail -= capacity_;
        RecvWqe& w = slots_[tail];
        w.wr_id = wr.wr_id;
        w.num_sge = wr.num_sge;
        w.total_length = 0;
        for (uint32_t i = 0; i < wr.num_sge; ++i) {
            w.sge[i] = wr.sg_list[i];
            w.total_length += wr.sg_list[i].length;
        }
        ++count_;
        return 0;
    }
    bool pop(RecvWqe* out)
    {
        if (count_ == 0)
            return false;
        // Only the SGEs in use: the whole WQE is 280 octets, most of them
        // unused, and this copy is on the receive path of every Send.
        const RecvWqe& w = slots_[head_];
        out->wr_id = w.wr_id;
        out->num_sge = w.num_sge;
        out->total_length = w.total_length;
        for (uint32_t i = 0; i < w.num_sge; ++i) out->sge[i] = w.sge[i];
        if (++head_ == capacity_) head_ = 0;
        --count_;
        return true;
    }
    // The WQE the next pop() copies (the caller holds the ring's lock).
    const RecvWqe* head_slot() const { return slots_.empty() ? nullptr : &slots_[head_]; }
    uint32_t count() const { return count_; }
    uint32_t capacity() const { return capacity_; }
    uint32_t max_sge() const { return max_sge_; }
    void clear() { head_ = count_ = 0; }

private:
    std::vector<RecvWqe> slots_;
    uint32_t capacity_ = 0;
    uint32_t max_sge_ = 0;
    uint32_t head_ = 0;
    uint32_t count_ = 0;
};

}  // namespace iwemu
