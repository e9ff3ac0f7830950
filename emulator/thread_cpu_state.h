// Whether a thread of this process is runnable, and how long it has run.
//
// The poll lease (rx_poll_owner.cpp) must tell a poller that walked away
// from one that was merely preempted: both leave a lease tick without a
// poll.  A thread that sleeps is not runnable; a preempted one is runnable
// but its run time stands still; one that spins elsewhere runs.  The kernel
// shows both in /proc/self/task/<tid>/: the state in stat, the run time in
// schedstat (accounted when the thread leaves its CPU, and at each scheduler
// tick while it runs: a few milliseconds late for a running thread).
#pragma once
#include <sys/types.h>

#include <cstdint>
#include <optional>

namespace iwemu {

// The calling thread's kernel thread id (gettid), cached per thread.
pid_t current_tid();

struct ThreadCpuState {
    bool runnable;      // state R: running, or waiting on a run queue
    int64_t on_cpu_ns;  // run time since the thread started
};

// nullopt when the thread is gone or the kernel keeps no run time
// (no CONFIG_SCHED_INFO).  Reads two small /proc files: for rare
// decisions, never on a data path.
std::optional<ThreadCpuState> thread_cpu_state(pid_t tid);

}  // namespace iwemu
