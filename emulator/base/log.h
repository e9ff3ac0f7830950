// Minimal leveled logging to stderr (the emulator runs inside someone else's
// process: quiet by default, IWEMU_LOG=debug for traces).
#pragma once

#include <atomic>
#include <cstdarg>
#include <cstdint>

namespace iwemu {

enum class LogLevel : uint8_t { error = 0, warn = 1, info = 2, debug = 3 };

extern std::atomic<int> g_log_level;

void log_message(LogLevel level, const char* fmt, ...) __attribute__((format(printf, 2, 3)));

inline bool log_enabled(LogLevel level)
{
    return static_cast<int>(level) <= g_log_level.load(std::memory_order_relaxed);
}

}  // namespace iwemu

#define IWEMU_LOG(level, ...)                                            \
    do {                                                                 \
        if (::iwemu::log_enabled(::iwemu::LogLevel::level))              \
            ::iwemu::log_message(::iwemu::LogLevel::level, __VA_ARGS__); \
    } while (0)
