#include "emulator/base/log.h"

#include <cstdio>
#include <unistd.h>

namespace iwemu {

std::atomic<int> g_log_level{static_cast<int>(LogLevel::warn)};

void log_message(LogLevel level, const char* fmt, ...)
{
    static const char* const names[] = {"error", "warn", "info", "debug"};
    char buf[512];
    int n = std::snprintf(buf, sizeof buf, "iwemu[%d] %s: ", static_cast<int>(getpid()),
                          names[static_cast<int>(level)]);
    va_list ap;
    va_start(ap, fmt);
    if (n > 0 && n < static_cast<int>(sizeof buf))
        n += std::vsnprintf(buf + n, sizeof buf - static_cast<size_t>(n), fmt, ap);
    va_end(ap);
    if (n >= static_cast<int>(sizeof buf)) n = sizeof buf - 1;
    if (n > 0 && buf[n - 1] != '\n' && n < static_cast<int>(sizeof buf) - 1) buf[n++] = '\n';
    // One write(2): lines from different threads do not interleave.
    ssize_t ignored = ::write(2, buf, static_cast<size_t>(n));
    (void)ignored;
}

}  // namespace iwemu
