#include "emulator/engine.h"

#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <iterator>

#include "emulator/emulator.h"
#include "emulator/base/log.h"

namespace iwemu {

namespace {
thread_local const Engine* t_engine = nullptr;  // set in the engine's own thread
}  // namespace

Engine::Engine(Emulator& emu) : emu_(emu)
{
    epfd_ = epoll_create1(EPOLL_CLOEXEC);
    wake_fd_ = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    epoll_event ev{};
    ev.events = EPOLLIN;
    ev.data.u64 = UINT64_MAX;
    epoll_ctl(epfd_, EPOLL_CTL_ADD, wake_fd_, &ev);
    thread_ = std::thread([this] { run(); });
}

Engine::~Engine()
{
    stop();
    if (thread_.joinable()) thread_.join();
    linger_close_all();
    if (epfd_ >= 0) close(epfd_);
    if (wake_fd_ >= 0) close(wake_fd_);
}

void Engine::stop()
{
    if (stop_.exchange(true)) return;
    const uint64_t one = 1;
    ssize_t ignored = write(wake_fd_, &one, sizeof one);
    (void)ignored;
}

void Engine::join_until(std::chrono::steady_clock::time_point deadline)
{
    while (!exited_.load(std::memory_order_acquire) && std::chrono::steady_clock::now() < deadline)
        std::this_thread::sleep_for(std::chrono::milliseconds(1));
    if (!thread_.joinable()) return;
    if (exited_.load(std::memory_order_acquire))
        thread_.join();
    else
        thread_.detach();
}

int Engine::watch(int fd, uint32_t qp_num, uint32_t current, uint32_t events)
{
    if (events == current) return 0;
    if (events == 0) return epoll_ctl(epfd_, EPOLL_CTL_DEL, fd, nullptr) == 0 ? 0 : -errno;
    epoll_event ev{};
    ev.events = events;
    ev.data.u64 = qp_num;
    const int op = current == 0 ? EPOLL_CTL_ADD : EPOLL_CTL_MOD;
    return epoll_ctl(epfd_, op, fd, &ev) == 0 ? 0 : -errno;
}

void Engine::schedule_timer(uint32_t qp_num, Clock::time_point when)
{
    {
        std::lock_guard<std::mutex> g(timers_lock_);
        auto it = timers_.begin();
        while (it != timers_.end() && it->qp_num != qp_num) ++it;
        if (it == timers_.end()) {
            timers_.push_back({qp_num, when});
            timer_count_.store(timers_.size(), std::memory_order_release);
        } else if (when < it->when) {
            it->when = when;
        } else {
            return;  // an earlier run is already due
        }
    }
    // The engine thread recomputes its epoll timeout before sleeping again.
    if (t_engine == this) return;
    const uint64_t one = 1;
    ssize_t ignored = write(wake_fd_, &one, sizeof one);
    (void)ignored;
}

void Engine::poll_owner_add(uint32_t qp_num)
{
    {
        std::lock_guard<std::mutex> g(owners_lock_);
        owners_.push_back(qp_num);
        owner_count_.store(owners_.size());
    }
    owner_takes_.fetch_add(1, std::memory_order_relaxed);
    // Pairs with run(): it publishes asleep_unbounded_ before re-reading
    // owner_count_ (both seq_cst), so one of the two sides sees the other.
    if (asleep_unbounded_.load() && t_engine != this) {
        const uint64_t one = 1;
        ssize_t ignored = write(wake_fd_, &one, sizeof one);
        (void)ignored;
    }
}

void Engine::poll_owner_remove(uint32_t qp_num)
{
    std::lock_guard<std::mutex> g(owners_lock_);
    auto it = std::find(owners_.begin(), owners_.end(), qp_num);
    if (it == owners_.end()) return;
    *it = owners_.back();
    owners_.pop_back();
    owner_count_.store(owners_.size());
}

int Engine::lease_timeout_ms(int timeout_ms)
{
    if (owner_count_.load() == 0 && lease_idle_ticks_ >= poll_lease_linger_ticks) return timeout_ms;
    return timeout_ms >= 0 && timeout_ms < poll_lease_tick_ms ? timeout_ms : poll_lease_tick_ms;
}

void Engine::check_poll_leases()
{
    const auto now = Clock::now();
    if (now < next_lease_check_) return;
    next_lease_check_ = now + std::chrono::milliseconds(poll_lease_tick_ms);
    const uint32_t takes = owner_takes_.load(std::memory_order_relaxed);
    if (owner_count_.load() == 0) {
        if (takes == owner_takes_seen_ && lease_idle_ticks_ < poll_lease_linger_ticks) ++lease_idle_ticks_;
        owner_takes_seen_ = takes;
        return;
    }
    lease_idle_ticks_ = 0;
    owner_takes_seen_ = takes;
    uint32_t owners[64];
    size_t n = 0;
    {
        std::lock_guard<std::mutex> g(owners_lock_);
        for (; n < owners_.size() && n < std::size(owners); ++n) owners[n] = owners_[n];
    }
    for (size_t i = 0; i < n; ++i) {
        if (std::shared_ptr<QueuePair> qp = emu_.find_qp(owners[i]))
            qp->poll_lease_tick();
        else
            poll_owner_remove(owners[i]);  // destroyed while owned
    }
}

int Engine::next_timeout_ms(int idle_timeout_ms)
{
    if (timer_count_.load(std::memory_order_acquire) == 0) return idle_timeout_ms;
    std::lock_guard<std::mutex> g(timers_lock_);
    if (timers_.empty()) return idle_timeout_ms;
    Clock::time_point first = timers_.front().when;
    for (const QpTimer& t : timers_) first = std::min(first, t.when);
    const auto now = Clock::now();
    if (first <= now) return 0;
    // Round up: waking a little late is fine, waking early just loops once more.
    const auto ms = std::chrono::ceil<std::chrono::milliseconds>(first - now).count();
    const int t = ms > 60000 ? 60000 : static_cast<int>(ms);
    return idle_timeout_ms >= 0 && idle_timeout_ms < t ? idle_timeout_ms : t;
}

void Engine::fire_timers()
{
    if (timer_count_.load(std::memory_order_acquire) == 0) return;
    // Take the due ones out first: on_timer() may arm its QP's timer again.
    uint32_t due[64];
    size_t n = 0;
    {
        std::lock_guard<std::mutex> g(timers_lock_);
        const auto now = Clock::now();
        for (size_t i = 0; i < timers_.size() && n < std::size(due);) {
            if (timers_[i].when <= now) {
                due[n++] = timers_[i].qp_num;
                timers_[i] = timers_.back();
                timers_.pop_back();
            } else {
                ++i;
            }
        }
        timer_count_.store(timers_.size(), std::memory_order_release);
    }
    for (size_t i = 0; i < n; ++i)
        if (std::shared_ptr<QueuePair> qp = emu_.find_qp(due[i])) qp->on_timer();
}

void Engine::run()
{
    t_engine = this;
    constexpr int max_events = 64;
    epoll_event events[max_events];
    const BusyPoll mode = emu_.config().busy_poll;
    const auto spin = std::chrono::microseconds(emu_.config().busy_poll_us);
    auto last_work = Clock::now();
    uint64_t app_calls_seen = emu_.app_calls();
    auto app_calls_changed = last_work;
    while (!stop_.load(std::memory_order_acquire)) {
        int timeout = -1;
        const auto now = Clock::now();
        bool busy = mode == BusyPoll::on;
        if (mode == BusyPoll::idle_app) {
            // Spin only for an application that sleeps outside verbs (its
            // core is idle; waking this thread there costs more than the
            // receive).  An application in a verbs loop keeps its core busy,
            // and a spinning engine would take the CPU from it.
            const uint64_t calls = emu_.app_calls();
            if (calls != app_calls_seen) {
                app_calls_seen = calls;
                app_calls_changed = now;
            }
            busy = now - app_calls_changed > app_idle_after;
        }
        if (busy && now - last_work < spin) timeout = 0;
        timeout = linger_timeout_ms(next_timeout_ms(lease_timeout_ms(timeout)));
        if (timeout < 0) {
            asleep_unbounded_.store(true);
            if (owner_count_.load() > 0) timeout = poll_lease_tick_ms;
        }
        const int n = epoll_wait(epfd_, events, max_events, timeout);
        asleep_unbounded_.store(false, std::memory_order_relaxed);
        if (n < 0) {
            if (errno == EINTR) continue;
            IWEMU_LOG(error, "epoll_wait: %d", errno);
            break;
        }
        if (n > 0) last_work = Clock::now();
        for (int i = 0; i < n; ++i) {
            if (events[i].data.u64 == UINT64_MAX) {
                uint64_t v;
                ssize_t ignored = read(wake_fd_, &v, sizeof v);
                (void)ignored;
                continue;
            }
            if (is_linger_tag(events[i].data.u64)) {
                linger_ready(static_cast<int>(events[i].data.u64 & ~linger_tag));
                continue;
            }
            // Look the QP up by number: a QP destroyed meanwhile is simply gone.
            std::shared_ptr<QueuePair> qp = emu_.find_qp(static_cast<uint32_t>(events[i].data.u64));
            if (!qp) continue;
            const uint32_t ev = events[i].events;
            if (ev & EPOLLOUT) qp->tx_progress();
            if (ev & (EPOLLIN | EPOLLRDHUP))
                qp->rx_progress();
            else if (ev & (EPOLLHUP | EPOLLERR))
                qp->rx_hangup();  // reported even without read interest (parked receiver)
        }
        fire_timers();
        check_poll_leases();
        linger_expire();
    }
    exited_.store(true, std::memory_order_release);
}

}  // namespace iwemu
