// The emulator's one background thread: an epoll loop over every connected
// QP socket.  EPOLLIN drives the receive path (unless a polling application
// got there first), EPOLLOUT the rest of a send batch that did not fit into
// the socket inline.  It sleeps in epoll_wait by default (2-core machines);
// IWEMU_BUSY_POLL makes it spin a while before sleeping.  QPs are named by
// qp_num in the epoll data and looked up through the emulator's registry, so
// a QP destroyed concurrently is never touched after it is gone.
//
// It also keeps one timer per QP (a receiver parked on a Send with no
// posted receive: its deadline, or a prompt re-run once a receive is
// posted; a graceful close whose FIN the peer's window holds back: the next
// look), the same way the CM loop keeps its MPA deadlines: the earliest one
// bounds epoll_wait.
//
// And the poll-ownership leases (rx_poll_owner.cpp): while a polling
// application thread owns some QP's receive path, the loop wakes once per
// lease tick and hands back the receive path of every QP nobody polled
// since the previous tick.
//
// And the sockets of destroyed QPs whose stream ends gracefully
// (close_linger.cpp): their FIN is queued; the loop reads and discards
// until the peer's FIN, then closes them and reports the end.
#pragma once

#include <atomic>
#include <optional>
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

    // Put QP qp_num's socket in the engine's epoll set with interest
    // `events`, 0 taking it out.  `current` is what the set holds now (0:
    // not in it); the QP keeps it under its sq_lock_, so every change is
    // exactly one epoll_ctl (ADD, MOD or DEL) and no change is none.
    int watch(int fd, uint32_t qp_num, uint32_t current, uint32_t events);
    void stop();
    // After stop(): join the thread if it ends before `deadline`, else let
    // it go (process exit with a lock held by a thread that never resumes).
    void join_until(std::chrono::steady_clock::time_point deadline);

    // Run QueuePair::on_timer() of qp_num from the engine thread at `when`
    // (now: as soon as possible).  One timer per QP: an earlier time
    // replaces a later one (on_timer re-arms whatever is still due later).
    // Wakes the engine thread when called elsewhere.
    using Clock = std::chrono::steady_clock;
    void schedule_timer(uint32_t qp_num, Clock::time_point when);

    // A polling thread took / gave back qp_num's receive path.
    void poll_owner_add(uint32_t qp_num);
    void poll_owner_remove(uint32_t qp_num);
    static constexpr int poll_lease_tick_ms = 1;
    // busy_poll = auto: no data-path verbs call for this long = the
    // application sleeps elsewhere.
    static constexpr std::chrono::milliseconds app_idle_after{2};

    // A destroyed QP's socket whose stream ends gracefully (close_linger.cpp):
    // our FIN is queued (shutdown(SHUT_WR) done).  The engine reads and
    // discards what the peer still sends until its FIN, an error, or
    // close_linger_max, then closes the socket and calls done(0: the
    // peer closed, else the error), from the engine thread with no lock held.
    // Closing at once instead would turn unread input into an RST, which
    // discards what the peer has not taken from TCP yet, and would leave the
    // CM without the peer's FIN (rdma_cm DISCONNECTED).  After stop() the
    // socket is drained and closed at once, and done is not called.  Every
    // drain is bounded: a peer still sending after it gets an RST.
    // fin_at: when our FIN goes (fin_grace.cpp); none: the caller sent it.
    void linger_close(int fd, std::function<void(int error)> done,
                      std::optional<Clock::time_point> fin_at = std::nullopt);
    static constexpr auto close_linger_max = std::chrono::seconds(60);
    size_t lingering() const;  // sockets in linger_close (tests)
    // At process exit, after stop(): the latest FIN still held for the grace
    // (none: no FIN held), then send them all (the kernel closes the sockets).
    std::optional<Clock::time_point> linger_fins_due() const;
    void linger_send_fins();

private:
    void run();
    int next_timeout_ms(int idle_timeout_ms);
    void fire_timers();
    int lease_timeout_ms(int timeout_ms);
    void check_poll_leases();
    // close_linger.cpp
    struct LingeringSocket {
        int fd;
        Clock::time_point deadline;
        std::function<void(int error)> done;
        std::optional<Clock::time_point> fin_at;  // our FIN still to send then
        size_t after_fin = 0;                      // octets the peer sent since
    };
    static constexpr uint64_t linger_tag = uint64_t{1} << 62;  // epoll data: linger_tag | fd
    static bool is_linger_tag(uint64_t data) { return data != UINT64_MAX && (data & linger_tag); }
    void linger_ready(int fd);
    void linger_expire();
    int linger_timeout_ms(int timeout_ms);
    void linger_finish(LingeringSocket s, bool peer_still_sending, int error);
    void linger_close_all();

    struct QpTimer {
        uint32_t qp_num;
        Clock::time_point when;
    };

    Emulator& emu_;
    int epfd_ = -1;
    int wake_fd_ = -1;
    std::atomic<bool> stop_{false};
    std::atomic<bool> exited_{false};        // run() returned
    std::mutex timers_lock_;
    std::vector<QpTimer> timers_;            // at most one per QP, few at a time
    std::atomic<size_t> timer_count_{0};     // lock-free "none armed" check per loop
    // Poll ownership leases.  The loop keeps ticking a while after the last
    // owner left (a ping-pong takes and returns ownership every message):
    // only a loop asleep without a bound needs waking when ownership is taken.
    std::mutex owners_lock_;
    std::vector<uint32_t> owners_;
    std::atomic<size_t> owner_count_{0};
    std::atomic<uint32_t> owner_takes_{0};
    std::atomic<bool> asleep_unbounded_{false};
    uint32_t owner_takes_seen_ = 0;           // engine thread
    int lease_idle_ticks_ = 0;                // engine thread: ticks without owners or takes
    Clock::time_point next_lease_check_{};    // engine thread
    static constexpr int poll_lease_linger_ticks = 200;
    mutable std::mutex linger_lock_;
    std::vector<LingeringSocket> lingering_;  // few at a time
    std::atomic<size_t> linger_count_{0};
    std::thread thread_;
};

}  // namespace iwemu
