// Assertions for the integration test programs.  They run under iwemu-run
// as plain executables (no GoogleTest: the launcher preloads the shim into
// the test process and the tests must stay free of extra runtime), so each
// keeps counting failed checks and reports once at exit.
//
// CHECK(cond): counts a failure and goes on; prints errno, since most
//   checks are on a verbs / rdma_cm call that sets it.
// REQUIRE(cond): a CHECK after which the program cannot continue; exits 1.
// check_exit_status(program, ok_line): main()'s return value.
#pragma once

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>

namespace iwemu::test {

inline int g_failures = 0;

inline int check_exit_status(const char* program, const char* ok_line)
{
    if (g_failures) {
        std::fprintf(stderr, "%s: %d check(s) failed\n", program, g_failures);
        return 1;
    }
    if (ok_line) std::printf("%s: %s\n", program, ok_line);
    return 0;
}

}  // namespace iwemu::test

#define CHECK(cond)                                                                               \
    do {                                                                                          \
        if (!(cond)) {                                                                            \
            std::fprintf(stderr, "%s:%d: CHECK failed: %s (errno %d %s)\n", __FILE__, __LINE__,   \
                         #cond, errno, std::strerror(errno));                                     \
            ++::iwemu::test::g_failures;                                                          \
        }                                                                                         \
    } while (0)

// Evaluates cond once: it is often a call with side effects.
#define REQUIRE(cond)                                  \
    do {                                               \
        const bool ok_ = static_cast<bool>(cond);      \
        CHECK(ok_ && #cond);                           \
        if (!ok_) {                                    \
            std::fprintf(stderr, "cannot continue\n"); \
            std::exit(1);                              \
        }                                              \
    } while (0)
