#include "emulator/emulator.h"

#include <ifaddrs.h>
#include <pthread.h>
#include <net/if.h>
#include <netinet/in.h>
#include <netpacket/packet.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <new>
#include <random>
#include <thread>

#include "emulator/capture/stream_capture.h"
#include "emulator/engine.h"
#include "emulator/faults/fault_injector.h"
#include "emulator/base/log.h"
#include "emulator/port_monitor.h"
#include "emulator/qp_endpoint.h"

namespace iwemu {

namespace {
std::atomic<Emulator*> g_instance{nullptr};
}

Emulator* Emulator::existing() { return g_instance.load(std::memory_order_acquire); }

Emulator& Emulator::instance()
{
    // Constructed on first use and never freed: at exit close_at_exit()
    // closes the connections and stops the engine with bounded waits.  An
    // application may call exit() from a signal handler that interrupted
    // it inside iwemu (qperf does, on SIGURG when its peer failed): that
    // thread still holds its QP's locks and never resumes, so the exit path
    // must not wait for them forever, and a thread it could not stop must
    // still find valid memory until the process is gone.
    static Emulator* emu = [] {
        auto* e = new Emulator(load_config());
        std::atexit([] { Emulator::instance().close_at_exit(); });
        pthread_atfork(nullptr, nullptr, [] { Emulator::instance().forget_after_fork(); });
        g_instance.store(e, std::memory_order_release);
        return e;
    }();
    return *emu;
}

void Emulator::close_at_exit()
{
    using namespace std::chrono_literals;
    const auto deadline = std::chrono::steady_clock::now() + 500ms;
    Engine* const engine = engine_ptr_.load(std::memory_order_acquire);
    if (engine) engine->stop();
    std::vector<std::shared_ptr<QueuePair>> qps;
    {
        std::unique_lock<std::mutex> g(objects_lock_, std::defer_lock);
        while (!g.try_lock()) {
            if (std::chrono::steady_clock::now() >= deadline) return;  // the kernel closes the sockets
            std::this_thread::sleep_for(1ms);
        }
        for (auto& [n, qp] : qps_) qps.push_back(qp);
    }
    // A FIN held for close_grace_ms (fin_grace.cpp) is held at exit too:
    // the kernel would send it now, into the window the grace is for.
    std::optional<std::chrono::steady_clock::time_point> fins_due = engine ? engine->linger_fins_due() : std::nullopt;
    for (auto& qp : qps) {
        const auto end = qp->fin_grace_end();
        if (end && (!fins_due || *end > *fins_due)) fins_due = end;
    }
    if (fins_due) std::this_thread::sleep_until(std::min(*fins_due, deadline));
    if (engine) engine->linger_send_fins();
    // Those we cannot lock in time are closed by the kernel (FIN or RST).
    for (auto& qp : qps) qp->shutdown_at_exit(deadline);
    if (engine) engine->join_until(deadline);
}

// fork(): the child is a copy with one thread.  The parent's QPs share their
// sockets with the parent (a shutdown() or FIN from here would end the
// parent's connections) and the engine's epoll set is the parent's too (the
// parent's engine thread would take the child's sockets' events).  The child
// forgets both, never touching them, and makes an engine of its own on first
// use: as with the kernel, a child uses the objects it creates.  What it
// forgets stays reachable from `left_by_parent`, so leak checkers stay quiet.
void Emulator::forget_after_fork()
{
    struct LeftByParent {
        std::unordered_map<uint32_t, std::shared_ptr<QueuePair>> qps;
        std::unique_ptr<Engine> engine;
    };
    static std::vector<LeftByParent>* left_by_parent = new std::vector<LeftByParent>;
    // A parent thread may have held these at fork time; it does not exist here.
    new (&objects_lock_) std::mutex;
    new (&engine_lock_) std::mutex;
    new (&few_lock_) std::shared_mutex;
    few_count_.store(0, std::memory_order_relaxed);
    engine_ptr_.store(nullptr, std::memory_order_release);
    left_by_parent->push_back({std::move(qps_), std::move(engine_)});
    qps_.clear();
}

Emulator::Emulator(const Config& config)
    : config_(config), stags_(limits::max_mr, config.stag_key_seed, limits::max_mw)
{
    g_log_level.store(static_cast<int>(config_.log_level), std::memory_order_relaxed);
    // Both before any connection exists.
    if (!config_.capture.path.empty()) capture::start(config_.capture);
    if (!config_.faults_error.empty()) {
        // iwemu-run refuses these before the program starts; a process that
        // loaded iwemu some other way stops here, at its first verbs call.
        std::fprintf(stderr, "iwemu: IWEMU_FAULTS: %s\niwemu: a fault-injection rule does not parse: exiting\n",
                     config_.faults_error.c_str());
        std::fflush(stderr);
        _exit(2);
    }
    if (!config_.faults.empty() && faults::start(config_.faults)) capture::hooks_on();
    std::random_device rd;
    // QP numbers start at a random point (like RNICs do) but stay below 2^24.
    next_qpn_ = 16 + (rd() & 0xFFFF);
    device_.fw_ver = firmware_version;
    // IBV_DEVICE_MEM_MGT_EXTENSIONS (local invalidate), SRQ resize not offered;
    // memory windows of type 1 and 2B (IBV_DEVICE_MEM_WINDOW, _TYPE_2B:
    // a type 2 window is associated with its QP and PD, memory_window.cpp).
    device_.device_cap_flags = (1u << 21) | (1u << 7) /* CURR_QP_STATE_MOD */ | (1u << 17) | (1u << 24);
    // RFC 7306 atomics, atomic with respect to each other across all QPs of
    // this process (atomics.cpp): IBV_ATOMIC_HCA.
    device_.atomic_cap = config_.rfc7306 ? atomic_cap_hca : atomic_cap_none;
    detect_identity();
    port_monitor_ = std::make_unique<PortMonitor>(choose_port_netdev(config_.netdev), [this](AsyncEventType type) {
        AsyncEvent ev;
        ev.type = type;
        ev.port_num = 1;
        post_async_event(ev);
    });
    qp_endpoint_ = std::make_unique<QpEndpoint>(*this);
}

PortAttributes Emulator::port_attributes() const
{
    PortAttributes p = port_;
    p.state = port_monitor_->state();
    p.phys_state = p.state == port_state_active ? port_phys_state_link_up : port_phys_state_disabled;
    return p;
}

Emulator::~Emulator()
{
    port_monitor_.reset();  // its thread posts async events
    qp_endpoint_.reset();  // no CM or timer thread may touch a QP from here on
    {
        std::lock_guard<std::mutex> g(engine_lock_);
        if (engine_) engine_->stop();
        engine_ptr_.store(nullptr, std::memory_order_release);
    }
    // Abort every live connection, then free objects in dependency order.
    std::unordered_map<uint32_t, std::shared_ptr<QueuePair>> qps;
    {
        std::lock_guard<std::mutex> g(objects_lock_);
        qps.swap(qps_);
    }
    for (auto& [n, qp] : qps) qp->shutdown_for_destroy();
    qps.clear();
    engine_.reset();
    srqs_.clear();
    cqs_.clear();
    pds_.clear();
}

void Emulator::detect_identity()
{
    ifaddrs* ifa = nullptr;
    if (getifaddrs(&ifa) != 0) return;
    for (ifaddrs* i = ifa; i; i = i->ifa_next) {
        if (!i->ifa_addr || (i->ifa_flags & IFF_LOOPBACK)) continue;
        if (i->ifa_addr->sa_family == AF_PACKET && identity_.mac == std::array<uint8_t, 6>{}) {
            auto* ll = reinterpret_cast<sockaddr_ll*>(i->ifa_addr);
            if (ll->sll_halen == 6) std::memcpy(identity_.mac.data(), ll->sll_addr, 6);
        }
    }
    for (ifaddrs* i = ifa; i; i = i->ifa_next) {
        if (!i->ifa_addr) continue;
        Gid g{};
        if (i->ifa_addr->sa_family == AF_INET) {
            auto* in = reinterpret_cast<sockaddr_in*>(i->ifa_addr);
            g[10] = g[11] = 0xFF;
            std::memcpy(&g[12], &in->sin_addr, 4);
            identity_.gids.push_back(g);
        } else if (i->ifa_addr->sa_family == AF_INET6) {
            auto* in6 = reinterpret_cast<sockaddr_in6*>(i->ifa_addr);
            std::memcpy(g.data(), &in6->sin6_addr, 16);
            identity_.gids.push_back(g);
        }
    }
    freeifaddrs(ifa);
    // GID 0: MAC-based EUI-64 in the link-local prefix, as siw reports it.
    Gid g0{};
    g0[0] = 0xFE;
    g0[1] = 0x80;
    const auto& m = identity_.mac;
    g0[8] = m[0] ^ 0x02; g0[9] = m[1]; g0[10] = m[2]; g0[11] = 0xFF;
    g0[12] = 0xFE; g0[13] = m[3]; g0[14] = m[4]; g0[15] = m[5];
    identity_.gids.insert(identity_.gids.begin(), g0);
    uint64_t guid = 0;
    for (int i = 8; i < 16; ++i) guid = guid << 8 | g0[i];
    device_.node_guid = guid;
    device_.sys_image_guid = guid;
    port_.gid_tbl_len = static_cast<int32_t>(identity_.gids.size());
}

void Emulator::set_async_event_handler(std::function<void(const AsyncEvent&)> handler)
{
    std::lock_guard<std::mutex> g(async_lock_);
    async_handler_ = std::move(handler);
    port_monitor_->start();  // once; the lock orders concurrent first calls
}

void Emulator::post_async_event(const AsyncEvent& ev)
{
    std::function<void(const AsyncEvent&)> h;
    {
        std::lock_guard<std::mutex> g(async_lock_);
        h = async_handler_;
    }
    IWEMU_LOG(info, "async event %u (qp %u)", static_cast<unsigned>(ev.type), ev.qp ? ev.qp->qp_num() : 0u);
    if (h) h(ev);
}

int Emulator::alloc_pd(ProtectionDomain** out)
{
    std::lock_guard<std::mutex> g(objects_lock_);
    if (pds_.size() >= limits::max_pd) return ENOMEM;
    const uint32_t h = next_pd_++;
    auto pd = std::make_unique<ProtectionDomain>(h);
    *out = pd.get();
    pds_.emplace(h, std::move(pd));
    return 0;
}

int Emulator::dealloc_pd(ProtectionDomain* pd)
{
    if (!pd) return EINVAL;
    std::lock_guard<std::mutex> g(objects_lock_);
    auto it = pds_.find(pd->handle());
    if (it == pds_.end() || it->second.get() != pd) return EINVAL;
    if (pd->users() != 0) return EBUSY;
    pds_.erase(it);
    return 0;
}

namespace {
// reg_mr's and rereg_mr's checks of a region's memory and rights.
int check_region(void* addr, uint64_t length, uint64_t iova, uint32_t access)
{
    // IB rule (ibv_reg_mr(3)): remote write or atomic needs local write.
    if ((access & (access_remote_write | access_remote_atomic)) && !(access & access_local_write)) return EINVAL;
    // Implicit ODP (the kernel's convention, ib_uverbs / mlx5): addr 0 and
    // length SIZE_MAX name the whole address space, at Tagged Offset 0.
    if (!addr && length == UINT64_MAX && (access & access_on_demand)) return iova == 0 ? 0 : EINVAL;
    if (length == 0 || length > limits::max_mr_size) return EINVAL;
    if (!addr) return EINVAL;
    if (reinterpret_cast<uintptr_t>(addr) + length < reinterpret_cast<uintptr_t>(addr)) return EINVAL;
    if (iova + length < iova && iova + length != 0) return EINVAL;
    return 0;
}
}  // namespace

int Emulator::reg_mr(ProtectionDomain* pd, void* addr, uint64_t length, uint64_t iova, uint32_t access,
                     MemoryRegion** out)
{
    if (!pd || !out) return EINVAL;
    if (int err = check_region(addr, length, iova, access)) return err;
    int rc = stags_.register_region(pd, addr, length, iova, access, out);
    if (rc == 0) pd->users_.fetch_add(1, std::memory_order_acq_rel);
    return rc;
}

int Emulator::dereg_mr(MemoryRegion* mr)
{
    if (!mr || !mr->pd()) return EINVAL;
    ProtectionDomain* pd = mr->pd();
    if (int err = stags_.deregister(mr)) return err;
    pd->users_.fetch_sub(1, std::memory_order_acq_rel);
    return 0;
}

int Emulator::alloc_mw(ProtectionDomain* pd, MwType type, MemoryWindow** out)
{
    if (!pd || !out) return EINVAL;
    int rc = stags_.allocate_window(pd, type, out);
    if (rc == 0) pd->users_.fetch_add(1, std::memory_order_acq_rel);
    return rc;
}

int Emulator::dealloc_mw(MemoryWindow* mw)
{
    if (!mw) return EINVAL;
    ProtectionDomain* pd = mw->pd();
    stags_.free_window(mw);
    pd->users_.fetch_sub(1, std::memory_order_acq_rel);
    return 0;
}

int Emulator::rereg_mr(MemoryRegion* mr, ProtectionDomain* pd, void* addr, uint64_t length, uint64_t iova,
                       uint32_t access)
{
    if (!mr || !mr->pd() || !pd) return EINVAL;
    if (int err = check_region(addr, length, iova, access)) return err;
    ProtectionDomain* old_pd = mr->pd();
    if (pd != old_pd) pd->users_.fetch_add(1, std::memory_order_acq_rel);
    if (int err = stags_.reregister(mr, pd, addr, length, iova, access)) {
        if (pd != old_pd) pd->users_.fetch_sub(1, std::memory_order_acq_rel);
        return err;
    }
    if (pd != old_pd) old_pd->users_.fetch_sub(1, std::memory_order_acq_rel);
    return 0;
}

int Emulator::create_cq(uint32_t cqe, CompletionQueue** out)
{
    if (cqe == 0 || cqe > limits::max_cqe || !out) return EINVAL;
    std::lock_guard<std::mutex> g(objects_lock_);
    if (cqs_.size() >= limits::max_cq) return ENOMEM;
    auto cq = std::make_unique<CompletionQueue>(*this, cqe);
    *out = cq.get();
    cq_numbers_[cq.get()] = next_cqn_++;
    cqs_.emplace(cq.get(), std::move(cq));
    return 0;
}

int Emulator::destroy_cq(CompletionQueue* cq)
{
    std::lock_guard<std::mutex> g(objects_lock_);
    auto it = cqs_.find(cq);
    if (it == cqs_.end()) return EINVAL;
    for (auto& [n, qp] : qps_)
        if (qp->init_attr().send_cq == cq || qp->init_attr().recv_cq == cq) return EBUSY;
    cq_numbers_.erase(cq);
    cqs_.erase(it);
    return 0;
}

int Emulator::create_srq(ProtectionDomain* pd, const SrqAttr& attr, SharedReceiveQueue** out)
{
    if (!pd || !out || attr.max_wr == 0 || attr.max_wr > limits::max_srq_wr || attr.max_sge > limits::max_srq_sge ||
        attr.srq_limit > attr.max_wr)
        return EINVAL;
    std::lock_guard<std::mutex> g(objects_lock_);
    if (srqs_.size() >= limits::max_srq) return ENOMEM;
    auto srq = std::make_unique<SharedReceiveQueue>(*this, pd, attr.max_wr, attr.max_sge ? attr.max_sge : 1,
                                                    attr.srq_limit);
    *out = srq.get();
    srqs_.emplace(srq.get(), std::move(srq));
    pd->users_.fetch_add(1, std::memory_order_acq_rel);
    return 0;
}

int Emulator::destroy_srq(SharedReceiveQueue* srq)
{
    std::lock_guard<std::mutex> g(objects_lock_);
    auto it = srqs_.find(srq);
    if (it == srqs_.end()) return EINVAL;
    if (srq->users.load() != 0) return EBUSY;
    srq->pd()->users_.fetch_sub(1, std::memory_order_acq_rel);
    srqs_.erase(it);
    return 0;
}

int Emulator::create_qp(ProtectionDomain* pd, QpInitAttr& attr, QueuePair** out)
{
    if (!pd || !out || !attr.send_cq || !attr.recv_cq) return EINVAL;
    QpCap& cap = attr.cap;
    if (cap.max_send_wr > limits::max_qp_wr || cap.max_recv_wr > limits::max_qp_wr ||
        cap.max_send_sge > limits::max_sge || cap.max_recv_sge > limits::max_sge ||
        cap.max_inline_data > limits::max_inline_data)
        return EINVAL;
    if (attr.srq && attr.srq->pd() != pd) return EINVAL;
    // Grant at least one WQE/SGE.  Inline data is bounded by the device,
    // not by the request, as kernel siw checks it (SIW_MAX_INLINE): every
    // send WQE holds the device maximum, and that is what the QP reports.
    cap.max_inline_data = limits::max_inline_data;
    if (cap.max_send_wr == 0) cap.max_send_wr = 1;
    if (!attr.srq && cap.max_recv_wr == 0) cap.max_recv_wr = 1;
    if (cap.max_send_sge == 0) cap.max_send_sge = 1;
    if (cap.max_recv_sge == 0) cap.max_recv_sge = 1;
    if (attr.srq) cap.max_recv_wr = cap.max_recv_sge = 0;
    std::shared_ptr<QueuePair> qp;
    {
        std::unique_lock<std::shared_mutex> f(few_lock_);
        std::lock_guard<std::mutex> g(objects_lock_);
        if (qps_.size() >= limits::max_qp) return ENOMEM;
        if (cqs_.find(attr.send_cq) == cqs_.end() || cqs_.find(attr.recv_cq) == cqs_.end()) return EINVAL;
        // (endpoint port << 8) | slot, so that a peer can dial it (qp_endpoint.h);
        // numbered here only when this process cannot listen.
        uint32_t qpn = qp_endpoint_->allocate_qpn([this](uint32_t n) { return qps_.count(n) != 0; });
        while (qpn < 2 || qps_.count(qpn)) qpn = next_qpn_++ & 0xFFFFFF;
        qp = std::make_shared<QueuePair>(*this, qpn, pd, attr);
        qps_.emplace(qpn, qp);
        refresh_few_qps_locked();
    }
    pd->users_.fetch_add(1, std::memory_order_acq_rel);
    if (attr.srq) attr.srq->users.fetch_add(1);
    attr.send_cq->attach_qp(qp.get());
    if (attr.recv_cq != attr.send_cq) attr.recv_cq->attach_qp(qp.get());
    *out = qp.get();
    return 0;
}

int Emulator::destroy_qp(QueuePair* qp)
{
    if (!qp) return EINVAL;
    std::shared_ptr<QueuePair> keep;
    {
        std::unique_lock<std::shared_mutex> f(few_lock_);
        std::lock_guard<std::mutex> g(objects_lock_);
        auto it = qps_.find(qp->qp_num());
        if (it == qps_.end() || it->second.get() != qp) return EINVAL;
        keep = it->second;
        qps_.erase(it);
        refresh_few_qps_locked();
    }
    // Detach first: after this no polling thread can enter the QP's receive path.
    const QpInitAttr& ia = keep->init_attr();
    ia.send_cq->detach_qp(qp);
    if (ia.recv_cq != ia.send_cq) ia.recv_cq->detach_qp(qp);
    keep->shutdown_for_destroy();
    local_peers_.forget(qp);
    qp_endpoint_->forget(keep->qp_num());  // cancel a pending modify_qp connect, free the number
    if (ia.srq) ia.srq->users.fetch_sub(1);
    keep->pd()->users_.fetch_sub(1, std::memory_order_acq_rel);
    return 0;  // memory goes when the engine drops its last reference
}

void Emulator::refresh_few_qps_locked()
{
    size_t n = 0;
    if (qps_.size() <= few_qps_max)
        for (const auto& [num, qp] : qps_) few_[n++] = qp.get();
    few_count_.store(n, std::memory_order_relaxed);
}

std::shared_ptr<QueuePair> Emulator::find_qp(uint32_t qp_num)
{
    std::lock_guard<std::mutex> g(objects_lock_);
    auto it = qps_.find(qp_num);
    return it == qps_.end() ? nullptr : it->second;
}

uint32_t Emulator::live_qps() const
{
    std::lock_guard<std::mutex> g(const_cast<std::mutex&>(objects_lock_));
    return static_cast<uint32_t>(qps_.size());
}

Engine& Emulator::engine()
{
    // No lock once it exists: the data path asks for it on every interest change.
    if (Engine* e = engine_ptr_.load(std::memory_order_acquire)) return *e;
    std::lock_guard<std::mutex> g(engine_lock_);
    if (!engine_) {
        engine_ = std::make_unique<Engine>(*this);
        engine_ptr_.store(engine_.get(), std::memory_order_release);
    }
    return *engine_;
}

}  // namespace iwemu
