// One open rdma_cm file: its event queue and the fd the application polls.
//
// The application-visible fd is an eventfd whose counter is non-zero exactly
// while the queue holds an event, so poll/select/epoll readiness is the
// kernel's (POLLIN while events are pending; kernel-surface.md §4.5).  GET_EVENT
// waits on a private dup of it, which stays valid even if the application
// closes the fd while another of its threads is blocked in GET_EVENT.
#pragma once

#include <atomic>
#include <cstdint>
#include <deque>
#include <memory>

#include "kmod-shim/ucma_abi.h"

namespace iwemu::shim {

struct UcmaEvent {
    uint32_t handle = 0;   // id the event belongs to (the listener for CONNECT_REQUEST)
    uint32_t child = 0;    // CONNECT_REQUEST: the new id, published at delivery
    uint32_t event = 0;    // enum rdma_cm_event_type
    int32_t status = 0;    // 0 or -errno
    rdma_ucm_conn_param conn{};
};

struct UcmaFile {
    int fd = -1;       // what ucma_open() returned
    int wait_fd = -1;  // dup(fd): GET_EVENT blocks on it
    std::atomic<bool> closed{false};  // close() done; read unlocked by waiters
    std::deque<UcmaEvent> events;

    ~UcmaFile();
    // All with ucma_lock() held.
    void push(const UcmaEvent& ev);
    bool pop(UcmaEvent* ev);
    // Drops the queued events of one id (DESTROY_ID); returns them for cleanup.
    std::deque<UcmaEvent> take_events_of(uint32_t handle);
    // Wakes every waiter for good (close()).
    void shut();

private:
    void set_ready(bool ready);
    bool ready_ = false;
};

// Creates the eventfd pair; nullptr with errno on failure.
std::shared_ptr<UcmaFile> ucma_file_create(int open_flags);

// Blocks until wait_fd is readable or a signal arrives.  Returns 0 or
// -EINTR.  Called WITHOUT ucma_lock().
int ucma_file_wait(const UcmaFile& file);

}  // namespace iwemu::shim
