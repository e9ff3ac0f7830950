// Shared Receive Queue: preallocated ring of receive WQEs shared by QPs of
// one PD, with the limit event (IBV_EVENT_SRQ_LIMIT_REACHED, fires once per
// arming when the number of posted WQEs drops below srq_limit).
#pragma once

#include <atomic>
#include <cstdint>
#include <mutex>
#include <optional>
#include <vector>

#include "emulator/recv_queue.h"
#include "emulator/verbs_types.h"

namespace iwemu {

class Emulator;

class SharedReceiveQueue {
public:
    SharedReceiveQueue(Emulator& emu, ProtectionDomain* pd, uint32_t max_wr, uint32_t max_sge, uint32_t limit);
    SharedReceiveQueue(const SharedReceiveQueue&) = delete;
    SharedReceiveQueue& operator=(const SharedReceiveQueue&) = delete;

    // ibv_post_srq_recv: ENOMEM when full, EINVAL for too many SGEs; *bad = index of the failing WR.
    int post_recv(const RecvWr* wrs, size_t n, size_t* bad);
    // ibv_modify_srq: srq_attr_limit (arm the limit event), srq_attr_max_wr (EINVAL: no resize).
    int modify(const SrqAttr& attr, uint32_t mask);
    int query(SrqAttr* attr) const;

    ProtectionDomain* pd() const { return pd_; }
    void* user_context = nullptr;

    // -- emulator internals ------------------------------------------------
    // Take the oldest WQE (false if empty); may raise the limit event.
    // `waiter`: the QP parked on an empty SRQ (RNR wait), kicked by the next post.
    bool take(RecvWqe* out, std::optional<uint32_t> waiter = std::nullopt);
    std::atomic<uint32_t> users{0};  // QPs attached (destroy_srq: EBUSY)

private:
    Emulator& emu_;
    ProtectionDomain* pd_;
    mutable std::mutex lock_;
    RecvRing ring_;
    uint32_t limit_ = 0;
    std::vector<uint32_t> waiters_;  // qp_num of QPs parked on the empty SRQ
};

}  // namespace iwemu
