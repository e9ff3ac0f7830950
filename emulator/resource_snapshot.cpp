#include "emulator/resource_snapshot.h"

#include <algorithm>
#include <atomic>

#include "emulator/emulator.h"

namespace iwemu {

ResourceSnapshot Emulator::snapshot()
{
    ResourceSnapshot s;
    {
        std::lock_guard<std::mutex> g(objects_lock_);
        for (const auto& [h, pd] : pds_) s.pds.push_back({h, pd->users()});
        for (const auto& [n, qp] : qps_) {
            const CounterValues c = counter_values(qp->counters());
            s.qps.push_back({n, qp->pd() ? qp->pd()->handle() : 0, static_cast<uint8_t>(qp->state()), 0, c});
            s.port += c;
        }
        for (const auto& [ptr, cq] : cqs_) {
            uint64_t users = 0;
            for (const auto& [n, qp] : qps_)
                users += (qp->init_attr().send_cq == ptr) + (qp->init_attr().recv_cq == ptr && qp->init_attr().recv_cq != qp->init_attr().send_cq);
            s.cqs.push_back({cq_numbers_[ptr], cq->capacity(), users});
        }
        s.srqs = static_cast<uint32_t>(srqs_.size());
    }
    stags_.for_each_valid([&](const MemoryRegion& mr) {
        s.mrs.push_back({mr.stag(), mr.iova(), mr.length(), mr.pd() ? mr.pd()->handle() : 0});
    });
    std::sort(s.qps.begin(), s.qps.end(), [](auto& a, auto& b) { return a.qp_num < b.qp_num; });
    std::sort(s.cqs.begin(), s.cqs.end(), [](auto& a, auto& b) { return a.cqn < b.cqn; });
    std::sort(s.pds.begin(), s.pds.end(), [](auto& a, auto& b) { return a.pdn < b.pdn; });
    return s;
}

}  // namespace iwemu
