// A thread that blocks for a completion event receives itself.
//
// ibv_get_cq_event sleeps in read() on the completion channel.  Left to the
// engine thread, every message then costs two wake-ups: the engine's
// (EPOLLIN on the socket), then the application's (the channel, written by
// the engine).  Instead the shim's read() of a channel calls wait_channel():
// the waiting thread takes the read interest of the QPs that feed the
// channel's CQs (as a busy poller does, rx_poll_owner.cpp), sleeps in poll()
// on their sockets and on the channel, and runs their receive path when a
// socket turns readable.  One wake-up per message, as with a kernel RNIC
// whose interrupt handler completes the work; and the event that thread
// produces goes straight to its read(), not through the channel.
//
// The sockets go back to the engine before the read returns: the
// application does its own work next and may never come back.  Only while
// the process has few QPs (Emulator::visit_few_qps): the waiter watches at
// most few_qps_max sockets, and the engine serves everything else.
#include <poll.h>
#include <signal.h>

#include <array>
#include <cerrno>
#include <memory>

#include "emulator/cq.h"
#include "emulator/emulator.h"
#include "emulator/qp/qp.h"

namespace iwemu {

namespace {

// poll() fails with EINTR whatever the handler's flags; read() of the pipe
// would have restarted under SA_RESTART.  Which signal came is unknown
// here, so: restart unless some installed handler asks for EINTR.  Fault
// signals do not count: they arrive synchronously, never in a sleep
// (crash reporters and the sanitizers install them without SA_RESTART).
bool signals_restart_calls()
{
    for (int sig = 1; sig < NSIG; ++sig) {
        if (sig == SIGSEGV || sig == SIGBUS || sig == SIGFPE || sig == SIGILL || sig == SIGTRAP) continue;
        struct sigaction sa{};
        if (sigaction(sig, nullptr, &sa) != 0) continue;
        if (sa.sa_handler == SIG_DFL || sa.sa_handler == SIG_IGN) continue;
        if (!(sa.sa_flags & SA_RESTART)) return false;
    }
    return true;
}

}  // namespace

bool QueuePair::feeds_channel(int channel_fd) const
{
    return (init_.send_cq && init_.send_cq->event_channel() == channel_fd) ||
           (init_.recv_cq && init_.recv_cq->event_channel() == channel_fd);
}

// sq_lock_ held: the socket, unless the engine's rule applies (closed, EOF
// read, paused: RxOwnership::waiter_may_read).
int QueuePair::waitable_socket_locked() const
{
    const int fd = fd_.load(std::memory_order_relaxed);
    if (fd < 0 || destroyed_ || !rx_owner_.waiter_may_read(peer_fin_.load(std::memory_order_relaxed))) return -1;
    return fd;
}

int QueuePair::wait_take_rx()
{
    std::lock_guard<std::mutex> g(sq_lock_);
    const int fd = waitable_socket_locked();
    // No lease (poll_owner_add): the waiter hands it back itself.
    if (fd >= 0 && rx_owner_.apply(RxOwnership::ReaderEvent::waiter_sleeps)) apply_epoll_interest_locked();
    return fd;
}

int QueuePair::wait_socket() const
{
    std::lock_guard<std::mutex> g(sq_lock_);
    return waitable_socket_locked();
}

Emulator::ChannelWait Emulator::wait_channel(int channel_fd, uint64_t* record)
{
    if (!config_.event_waiter_receives || channel_fd < 0) return ChannelWait::not_handled;
    std::array<uint32_t, few_qps_max> nums{};
    size_t k = 0;
    const bool few = visit_few_qps(
        [&](QueuePair* qp) {
            if (k < nums.size() && qp->feeds_channel(channel_fd)) nums[k++] = qp->qp_num();
        },
        false);
    if (!few || k == 0) return ChannelWait::not_handled;

    // shared_ptrs keep the QPs (not their CQs) alive, so the hand-back below
    // reaches every QP taken, destroyed meanwhile or not.
    std::array<std::shared_ptr<QueuePair>, few_qps_max> qps;
    std::array<pollfd, few_qps_max + 1> fds{};
    fds[0] = {channel_fd, POLLIN, 0};
    size_t n = 0;
    for (size_t i = 0; i < k; ++i) {
        std::shared_ptr<QueuePair> qp = find_qp(nums[i]);
        if (!qp) continue;
        const int fd = qp->wait_take_rx();
        if (fd < 0) continue;
        fds[1 + n] = {fd, POLLIN, 0};
        qps[n++] = std::move(qp);
    }
    if (n == 0) return ChannelWait::not_handled;

    ChannelWait result = ChannelWait::ready;
    CompletionQueue::await_channel(channel_fd);
    for (;;) {
        if (::poll(fds.data(), 1 + n, -1) < 0) {
            if (errno == EINTR && signals_restart_calls()) continue;
            if (errno == EINTR) result = ChannelWait::interrupted;
            break;
        }
        if (fds[0].revents) break;
        // The receive path runs through the few-QP list, as a polling
        // thread's does: destroy_qp takes a QP off it before its CQs may go.
        std::array<bool, few_qps_max> listed{};
        const bool still_few = visit_few_qps(
            [&](QueuePair* qp) {
                for (size_t j = 0; j < n; ++j) {
                    if (qps[j].get() != qp || fds[1 + j].fd < 0) continue;
                    listed[j] = true;
                    if (fds[1 + j].revents) qp->try_rx_progress();
                    // Closed, at EOF or RNR-parked: the engine's rule now.
                    if (qp->wait_socket() != fds[1 + j].fd) fds[1 + j].fd = -1;
                }
            },
            false);
        if (CompletionQueue::awaited_event(record)) {
            result = ChannelWait::event;
            break;
        }
        if (!still_few) break;
        bool watching = false;
        for (size_t j = 0; j < n; ++j) {
            if (!listed[j]) fds[1 + j].fd = -1;  // destroyed
            watching |= fds[1 + j].fd >= 0;
        }
        if (!watching) break;  // the caller's read() sleeps; the engine receives
    }
    CompletionQueue::await_channel(-1);
    for (size_t j = 0; j < n; ++j) qps[j]->poll_return_rx();
    return result;
}

}  // namespace iwemu
