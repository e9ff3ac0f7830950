// The emulator's one background thread: an epoll loop over every connected
// QP socket.  EPOLLIN drives the receive path (unless a polling application
// got there first), EPOLLOUT the rest of a send batch that did not fit into
// the socket inline.  It sleeps in epoll_wait by default (2-core machines);
// IWEMU_BUSY_POLL makes it spin a while before sleeping.  QPs are named by
// qp_num in the epoll data and looked up through the emulator's registry, so
// a QP destroyed concurrently is never touched after it is gone.
//
// It also keeps one receive-path timer per QP (a receiver parked on a Send
// with no posted receive: its deadline, or a prompt re-run once a receive
// is posted), the same way the CM loop keeps its MPA deadlines: the earliest
// one bounds epoll_wait.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace iwemu {

class Emulator;

class Engine {
public:
    explicit Engine(Emulator& emu);
    ~Engine();  // stops and joins the thread
    Engine(const Engine&) = delete;
    Engine& operator=(const Engine&) = delete;

    // Register a socket for QP qp_num (EPOLLIN | EPOLLRDHUP, plus EPOLLOUT when asked).
    int add(int fd, uint32_t qp_num);
    int set_writable_interest(int fd, uint32_t qp_num, bool on);
    // After the peer's FIN: only EPOLLOUT (the receive side is finished).
    int set_write_only(int fd, uint32_t qp_num);
    // Any interest: `readable` off while the QP's receive path is parked
    // (the socket's data must stay in TCP: back-pressure on the sender);
    // EPOLLRDHUP (the peer's FIN) is reported either way.
    int set_interest(int fd, uint32_t qp_num, bool readable, bool writable);
    void remove(int fd);
    void stop();
    // After stop(): join the thread if it ends before `deadline`, else let
    // it go (process exit with a lock held by a thread that never resumes).
    void join_until(std::chrono::steady_clock::time_point deadline);

    // Run QueuePair::rx_timer() of qp_num from the engine thread at `when`
    // (now: as soon as possible).  One timer per QP: an earlier time
    // replaces a later one.  Wakes the engine thread when called elsewhere.
    using Clock = std::chrono::steady_clock;
    void schedule_rx(uint32_t qp_num, Clock::time_point when);

private:
    void run();
    int next_timeout_ms(int idle_timeout_ms);
    void fire_timers();

    struct RxTimer {
        uint32_t qp_num;
        Clock::time_point when;
    };

    Emulator& emu_;
    int epfd_ = -1;
    int wake_fd_ = -1;
    std::atomic<bool> stop_{false};
    std::atomic<bool> exited_{false};        // run() returned
    std::mutex timers_lock_;
    std::vector<RxTimer> timers_;            // at most one per QP, few at a time
    std::atomic<size_t> timer_count_{0};     // lock-free "none armed" check per loop
    std::thread thread_;
};

}  // namespace iwemu
