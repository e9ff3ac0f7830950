#include "emulator/thread_cpu_state.h"

#include <fcntl.h>
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstring>
#include <ctime>

namespace iwemu {
namespace {

// Reads /proc/self/task/<tid>/<name> into `text` (NUL-terminated); false if absent.
bool read_task_file(pid_t tid, const char* name, char* text, size_t size)
{
    char path[64];
    std::snprintf(path, sizeof path, "/proc/self/task/%d/%s", static_cast<int>(tid), name);
    const int fd = ::open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return false;
    const ssize_t n = ::read(fd, text, size - 1);
    ::close(fd);
    if (n <= 0) return false;
    text[n] = '\0';
    return true;
}

// The CPU-time clock of thread `tid` of this process: the clockid
// pthread_getcpuclockid() makes of a pthread_t (Linux posix-cpu-timers ABI:
// the complemented id shifted left by 3, the per-thread flag 4, and
// CPUCLOCK_SCHED 2, the scheduler's run time).
clockid_t thread_cpu_clock(pid_t tid)
{
    return static_cast<clockid_t>((~static_cast<uint32_t>(tid) << 3) | 4u | 2u);
}

}  // namespace

pid_t current_tid()
{
    static thread_local const pid_t tid = gettid();
    return tid;
}

std::optional<ThreadCpuState> thread_cpu_state(pid_t tid)
{
    if (tid <= 0) return std::nullopt;
    // stat: "<tid> (<comm>) <state> ..."; comm may hold spaces and parentheses.
    char stat[512];
    if (!read_task_file(tid, "stat", stat, sizeof stat)) return std::nullopt;
    const char* comm_end = std::strrchr(stat, ')');
    if (!comm_end || comm_end[1] != ' ' || comm_end[2] == '\0') return std::nullopt;
    const char state = comm_end[2];
    timespec ran{};
    if (::clock_gettime(thread_cpu_clock(tid), &ran) != 0) return std::nullopt;  // gone meanwhile
    return ThreadCpuState{state == 'R', ran.tv_sec * 1'000'000'000LL + ran.tv_nsec};
}

}  // namespace iwemu
