#include "emulator/engine.h"

#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>

#include "emulator/emulator.h"
#include "emulator/log.h"

namespace iwemu {

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

int Engine::add(int fd, uint32_t qp_num)
{
    epoll_event ev{};
    ev.events = EPOLLIN | EPOLLRDHUP;
    ev.data.u64 = qp_num;
    return epoll_ctl(epfd_, EPOLL_CTL_ADD, fd, &ev) == 0 ? 0 : -errno;
}

int Engine::set_writable_interest(int fd, uint32_t qp_num, bool on)
{
    epoll_event ev{};
    ev.events = EPOLLIN | EPOLLRDHUP | (on ? EPOLLOUT : 0u);
    ev.data.u64 = qp_num;
    return epoll_ctl(epfd_, EPOLL_CTL_MOD, fd, &ev) == 0 ? 0 : -errno;
}

int Engine::set_write_only(int fd, uint32_t qp_num)
{
    epoll_event ev{};
    ev.events = EPOLLOUT;
    ev.data.u64 = qp_num;
    return epoll_ctl(epfd_, EPOLL_CTL_MOD, fd, &ev) == 0 ? 0 : -errno;
}

void Engine::remove(int fd)
{
    epoll_ctl(epfd_, EPOLL_CTL_DEL, fd, nullptr);
}

void Engine::run()
{
    constexpr int max_events = 64;
    epoll_event events[max_events];
    const bool busy = emu_.config().busy_poll;
    const auto spin = std::chrono::microseconds(emu_.config().busy_poll_us);
    auto last_work = std::chrono::steady_clock::now();
    while (!stop_.load(std::memory_order_acquire)) {
        int timeout = -1;
        if (busy && std::chrono::steady_clock::now() - last_work < spin) timeout = 0;
        const int n = epoll_wait(epfd_, events, max_events, timeout);
        if (n < 0) {
            if (errno == EINTR) continue;
            IWEMU_LOG(error, "epoll_wait: %d", errno);
            break;
        }
        if (n > 0) last_work = std::chrono::steady_clock::now();
        for (int i = 0; i < n; ++i) {
            if (events[i].data.u64 == UINT64_MAX) {
                uint64_t v;
                ssize_t ignored = read(wake_fd_, &v, sizeof v);
                (void)ignored;
                continue;
            }
            // Look the QP up by number: a QP destroyed meanwhile is simply gone.
            std::shared_ptr<QueuePair> qp = emu_.find_qp(static_cast<uint32_t>(events[i].data.u64));
            if (!qp) continue;
            if (events[i].events & EPOLLOUT) qp->tx_progress();
            if (events[i].events & (EPOLLIN | EPOLLRDHUP | EPOLLHUP | EPOLLERR)) qp->rx_progress();
        }
    }
}

}  // namespace iwemu
