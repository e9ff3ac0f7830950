// The emulated RNIC: one instance per process, created on first use and torn
// down at exit (engine thread joined, sockets closed, objects freed).
//
// This is the API the libibverbs provider (provider/) and the kernel shim
// (kmod-shim/) call.  It is libibverbs-free but speaks ibv_* semantics and
// numeric values (verbs_types.h): conversion in the provider is a cast.
// Every call is thread-safe.  Errors are positive errno values, as the
// kernel's uverbs/siw return them (EINVAL, ENOMEM, EBUSY, EOPNOTSUPP).
//
//   Emulator& e = Emulator::instance();
//   ProtectionDomain* pd;  e.alloc_pd(&pd);
//   MemoryRegion* mr;      e.reg_mr(pd, buf, len, (uint64_t)buf, access_local_write | access_remote_write, &mr);
//   CompletionQueue* cq;   e.create_cq(256, &cq);   cq->set_event_handler(...);
//   QpInitAttr ia{cq, cq, nullptr, {64, 64, 4, 4, 64}};
//   QueuePair* qp;         e.create_qp(pd, ia, &qp);
//   ... the CM calls qp->attach_connection(params) ...
//   qp->post_send(&wr, 1, &bad);  cq->poll(wcs, 16);
#pragma once

#include <array>
#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <shared_mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include "emulator/config.h"
#include "emulator/cq.h"
#include "emulator/device.h"
#include "emulator/qp/local_peer.h"
#include "emulator/pd.h"
#include "emulator/qp/qp.h"
#include "emulator/resource_snapshot.h"
#include "emulator/srq.h"
#include "emulator/stag_table.h"
#include "emulator/verbs_types.h"

namespace iwemu {

class Engine;
class PortMonitor;
class QpEndpoint;

class Emulator {
public:
    // The process-wide instance (thread-safe lazy construction).
    static Emulator& instance();
    // That instance if some verbs call created it, else nullptr (never creates it).
    static Emulator* existing();

    // A private instance (tests: two endpoints in one process with different
    // settings).  Normal users take instance().
    explicit Emulator(const Config& config);
    ~Emulator();
    Emulator(const Emulator&) = delete;
    Emulator& operator=(const Emulator&) = delete;

    const Config& config() const { return config_; }
    const DeviceAttributes& device_attributes() const { return device_; }
    // The port's state follows its network interface (port_monitor.h).
    PortAttributes port_attributes() const;
    const DeviceIdentity& identity() const { return identity_; }
    std::string device_name() const { return "iwemu0"; }

    // Device-level async events (QP fatal / access error, CQ error, SRQ
    // limit, port active / error, ...).  Called with no emulator lock held.
    // The first handler starts the port's watch of its interface.
    void set_async_event_handler(std::function<void(const AsyncEvent&)> handler);

    // ---- verbs objects (0 or positive errno) -------------------------------
    int alloc_pd(ProtectionDomain** out);
    int dealloc_pd(ProtectionDomain* pd);  // EBUSY while MRs/QPs/SRQs use it

    // iova: Tagged Offset of addr (normally (uint64_t)addr; 0 with zero-based).
    // EINVAL: length 0 or > max_mr_size, remote write without local write (IB rule).
    int reg_mr(ProtectionDomain* pd, void* addr, uint64_t length, uint64_t iova, uint32_t access,
               MemoryRegion** out);
    // EINVAL while memory windows are bound to it (IBA 10.6.7.2.6, as rxe).
    int dereg_mr(MemoryRegion* mr);
    // ibv_rereg_mr: what is not to change is passed as the MR's current
    // value; the STag stays.  EINVAL as reg_mr, and while windows are bound to it.
    int rereg_mr(MemoryRegion* mr, ProtectionDomain* pd, void* addr, uint64_t length, uint64_t iova,
                 uint32_t access);

    // ibv_alloc_mw: an unbound window of type 1 or 2 (EINVAL other types,
    // ENOMEM beyond max_mw).  Bound by a bind_mw work request (SendWr::bind).
    int alloc_mw(ProtectionDomain* pd, MwType type, MemoryWindow** out);
    // Invalidates it if bound (remote access through it fails at once).
    int dealloc_mw(MemoryWindow* mw);
    // cqe: requested size; the CQ holds at least that many (EINVAL if 0 or above max_cqe).
    int create_cq(uint32_t cqe, CompletionQueue** out);
    int destroy_cq(CompletionQueue* cq);  // EBUSY while a QP uses it

    int create_srq(ProtectionDomain* pd, const SrqAttr& attr, SharedReceiveQueue** out);
    int destroy_srq(SharedReceiveQueue* srq);

    // attr.cap is updated with what was granted.  EINVAL: caps above the
    // limits, missing CQs; the QP starts in RESET.
    int create_qp(ProtectionDomain* pd, QpInitAttr& attr, QueuePair** out);
    // Aborts the connection (RST) if any; never blocks on the peer.
    int destroy_qp(QueuePair* qp);

    // ---- internals for the data path and the engine -----------------------
    StagTable& stags() { return stags_; }
    std::shared_ptr<QueuePair> find_qp(uint32_t qp_num);
    Engine& engine();   // started on first use
    // QP numbering and connecting QPs by modify_qp(RTR, AV + dest QPN) (qp_endpoint.h).
    QpEndpoint& qp_endpoint() { return *qp_endpoint_; }
    // Both ends of a loopback connection in this process (local_peer.h).
    LocalPeers& local_peers() { return local_peers_; }
    void post_async_event(const AsyncEvent& ev);
    uint32_t live_qps() const;
    // A copy of the live objects (resource_snapshot.h): RDMA netlink's view.
    ResourceSnapshot snapshot();
    // Data-path verbs calls (poll_cq, post_send, post_recv) change this
    // number: the engine's busy_poll = auto sees whether the application
    // is in a verbs loop.  Racy increments are fine: any change counts.
    void note_app_call() { app_calls_.store(app_calls_.load(std::memory_order_relaxed) + 1, std::memory_order_relaxed); }
    uint64_t app_calls() const { return app_calls_.load(std::memory_order_relaxed); }

    // While the process has at most few_qps_max QPs, an empty poll of any CQ
    // drives all of them: a thread spinning on one CQ serves the others too
    // (perftest's -R server spins on its handshake CQ while the peer Reads
    // from or Writes to the test QP; without this every message there would
    // wake the engine thread to preempt that spinning thread).  Calls f on
    // each QP and returns true, or returns false when there are more QPs
    // (or, with try_only, when the list is being changed).
    static constexpr size_t few_qps_max = 4;
    bool has_few_qps() const { return few_count_.load(std::memory_order_relaxed) > 0; }

    // A thread is about to block reading completion channel `channel_fd`
    // (the shim's read(), i.e. ibv_get_cq_event): sleep in poll() on the
    // channel and on the sockets of the QPs feeding it, and run their
    // receive path in this thread (rx_event_waiter.cpp).  event: *record is
    // an event this thread produced, never written to the channel; ready:
    // the channel has an event to read now (or the wait gave up: the
    // caller's read() blocks as usual); interrupted: a signal whose handler
    // asks for EINTR.
    enum class ChannelWait { event, ready, interrupted, not_handled };
    ChannelWait wait_channel(int channel_fd, uint64_t* record);
    template <typename F>
    bool visit_few_qps(F&& f, bool try_only = true)
    {
        if (few_count_.load(std::memory_order_relaxed) == 0) return false;
        std::shared_lock<std::shared_mutex> g(few_lock_, std::defer_lock);
        if (!try_only)
            g.lock();
        else if (!g.try_lock())
            return false;
        const size_t n = few_count_.load(std::memory_order_relaxed);
        for (size_t i = 0; i < n; ++i) f(few_[i]);
        return n > 0;
    }

private:
    void detect_identity();
    void refresh_few_qps_locked();  // few_lock_ (unique) and objects_lock_ held
    void close_at_exit();  // the process-wide instance, from atexit
    void forget_after_fork();  // the process-wide instance, in a fork()ed child

    Config config_;
    DeviceAttributes device_;
    PortAttributes port_;
    DeviceIdentity identity_;
    StagTable stags_;

    std::mutex objects_lock_;
    std::unordered_map<uint32_t, std::unique_ptr<ProtectionDomain>> pds_;
    std::unordered_map<CompletionQueue*, std::unique_ptr<CompletionQueue>> cqs_;
    std::unordered_map<const CompletionQueue*, uint32_t> cq_numbers_;  // netlink's cqn, creation order
    uint32_t next_cqn_ = 1;
    std::unordered_map<SharedReceiveQueue*, std::unique_ptr<SharedReceiveQueue>> srqs_;
    std::unordered_map<uint32_t, std::shared_ptr<QueuePair>> qps_;
    uint32_t next_pd_ = 1;
    uint32_t next_qpn_;

    std::mutex async_lock_;
    std::function<void(const AsyncEvent&)> async_handler_;

    std::mutex engine_lock_;
    std::unique_ptr<Engine> engine_;
    std::atomic<Engine*> engine_ptr_{nullptr};  // engine_, readable without engine_lock_
    std::atomic<uint64_t> app_calls_{0};
    // Taken before objects_lock_ (pollers hold it shared while in QP code).
    std::shared_mutex few_lock_;
    std::array<QueuePair*, few_qps_max> few_{};
    std::atomic<size_t> few_count_{0};  // 0: none, or more than few_qps_max

    LocalPeers local_peers_;
    std::unique_ptr<PortMonitor> port_monitor_;
    std::unique_ptr<QpEndpoint> qp_endpoint_;  // last: its threads call into the members above
};

}  // namespace iwemu
