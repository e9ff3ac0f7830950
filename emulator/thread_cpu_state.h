// Whether a thread of this process is runnable, and how long it has run.
//
// The poll lease (rx_poll_owner.cpp) must tell a poller that walked away
// from one that was merely preempted: both leave a lease tick without a
// poll.  A thread that sleeps is not runnable; a preempted one is runnable
// but its run time stands still; one that spins elsewhere runs.  The state
// comes from /proc/self/task/<tid>/stat, the run time from the thread's
// CPU-time clock, which the kernel brings up to date when it is read
// (schedstat only catches up with a running thread at the scheduler tick,
// milliseconds late).
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

// nullopt when the thread is gone.  Opens a /proc file and reads a clock
// (four system calls): for rare decisions, never on a data path.
std::optional<ThreadCpuState> thread_cpu_state(pid_t tid);

}  // namespace iwemu
