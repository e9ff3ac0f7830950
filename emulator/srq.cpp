#include "emulator/srq.h"

#include <algorithm>
#include <cerrno>

#include "emulator/emulator.h"
#include "emulator/engine.h"

namespace iwemu {

SharedReceiveQueue::SharedReceiveQueue(Emulator& emu, ProtectionDomain* pd, uint32_t max_wr, uint32_t max_sge,
                                       uint32_t limit)
    : emu_(emu), pd_(pd), limit_(limit)
{
    ring_.init(max_wr, max_sge);
}

int SharedReceiveQueue::post_recv(const RecvWr* wrs, size_t n, size_t* bad)
{
    std::lock_guard<std::mutex> g(lock_);
    int rc = 0;
    for (size_t i = 0; i < n && rc == 0; ++i) {
        if ((rc = ring_.push(wrs[i])) != 0 && bad) *bad = i;
    }
    if (!waiters_.empty() && ring_.count() > 0) {
        // Receivers parked on the empty SRQ: let the engine resume them.
        const auto now = Engine::Clock::now();
        for (uint32_t qpn : waiters_) emu_.engine().schedule_timer(qpn, now);
        waiters_.clear();
    }
    return rc;
}

int SharedReceiveQueue::modify(const SrqAttr& attr, uint32_t mask)
{
    if (mask & ~(srq_attr_max_wr | srq_attr_limit)) return EINVAL;
    if (mask & srq_attr_max_wr) return EINVAL;  // no resize (siw neither)
    std::lock_guard<std::mutex> g(lock_);
    if (mask & srq_attr_limit) {
        if (attr.srq_limit > ring_.capacity()) return EINVAL;
        limit_ = attr.srq_limit;
    }
    return 0;
}

int SharedReceiveQueue::query(SrqAttr* attr) const
{
    std::lock_guard<std::mutex> g(lock_);
    attr->max_wr = ring_.capacity();
    attr->max_sge = ring_.max_sge();
    attr->srq_limit = limit_;
    return 0;
}

bool SharedReceiveQueue::take(RecvWqe* out, std::optional<uint32_t> waiter)
{
    bool fire = false;
    {
        std::lock_guard<std::mutex> g(lock_);
        if (!ring_.pop(out)) {
            if (waiter && std::find(waiters_.begin(), waiters_.end(), *waiter) == waiters_.end())
                waiters_.push_back(*waiter);
            return false;
        }
        // The limit event fires once when the queue drops below the limit,
        // then the limit disarms (IB spec 11.5.2.2, as siw).
        if (limit_ != 0 && ring_.count() < limit_) {
            limit_ = 0;
            fire = true;
        }
    }
    if (fire) {
        AsyncEvent ev;
        ev.type = AsyncEventType::srq_limit_reached;
        ev.srq = this;
        emu_.post_async_event(ev);
    }
    return true;
}

}  // namespace iwemu
