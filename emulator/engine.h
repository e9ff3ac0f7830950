// The emulator's one background thread: an epoll loop over every connected
// QP socket.  EPOLLIN drives the receive path (unless a polling application
// got there first), EPOLLOUT the rest of a send batch that did not fit into
// the socket inline.  It sleeps in epoll_wait by default (2-core machines);
// IWEMU_BUSY_POLL makes it spin a while before sleeping.  QPs are named by
// qp_num in the epoll data and looked up through the emulator's registry, so
// a QP destroyed concurrently is never touched after it is gone.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <thread>

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
    void remove(int fd);
    void stop();

private:
    void run();

    Emulator& emu_;
    int epfd_ = -1;
    int wake_fd_ = -1;
    std::atomic<bool> stop_{false};
    std::thread thread_;
};

}  // namespace iwemu
