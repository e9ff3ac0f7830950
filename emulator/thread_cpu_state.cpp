#include "emulator/thread_cpu_state.h"

#include <fcntl.h>
#include <unistd.h>

#include <cinttypes>
#include <cstdio>
#include <cstring>

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
    // schedstat: "<ns on cpu> <ns waiting on a run queue> <timeslices>".
    char sched[96];
    uint64_t on_cpu = 0;
    if (!read_task_file(tid, "schedstat", sched, sizeof sched) || std::sscanf(sched, "%" SCNu64, &on_cpu) != 1)
        return std::nullopt;
    return ThreadCpuState{state == 'R', static_cast<int64_t>(on_cpu)};
}

}  // namespace iwemu
