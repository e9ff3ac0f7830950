// emulator/thread_cpu_state: what the poll lease reads of a poller thread.
#include <pthread.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <ctime>
#include <thread>

#include <gtest/gtest.h>

#include "emulator/thread_cpu_state.h"

namespace iwemu::test {
namespace {

using namespace std::chrono_literals;

TEST(ThreadCpuState, ARunningThreadIsRunnableAndItsRunTimeGrows)
{
    const auto before = thread_cpu_state(current_tid());
    ASSERT_TRUE(before.has_value());
    EXPECT_TRUE(before->runnable);
    // Spin past a scheduler tick (CONFIG_HZ 100 at the least): the kernel
    // accounts a running thread's time then, or when it leaves its CPU.
    const auto end = std::chrono::steady_clock::now() + 30ms;
    while (std::chrono::steady_clock::now() < end) {
    }
    const auto after = thread_cpu_state(current_tid());
    ASSERT_TRUE(after.has_value());
    EXPECT_GT(after->on_cpu_ns, before->on_cpu_ns);
}

// The lease tells a poller that runs elsewhere from one waiting for its CPU
// by its run time: that must be current, not as of the last scheduler tick
// (up to 10 ms at HZ=100).  After a few milliseconds of running without a
// system call, the run time read must be within a fraction of a
// millisecond of the thread's own CPU clock read just after it.
TEST(ThreadCpuState, ARunningThreadsRunTimeIsCurrentNotATickOld)
{
    for (int attempt = 0; attempt < 3; ++attempt) {
        const auto end = std::chrono::steady_clock::now() + 3ms;
        while (std::chrono::steady_clock::now() < end) {
        }
        const auto st = thread_cpu_state(current_tid());
        timespec own{};
        ASSERT_EQ(clock_gettime(CLOCK_THREAD_CPUTIME_ID, &own), 0);
        ASSERT_TRUE(st.has_value());
        EXPECT_TRUE(st->runnable);
        const int64_t own_ns = own.tv_sec * 1'000'000'000LL + own.tv_nsec;
        EXPECT_LE(st->on_cpu_ns, own_ns);
        EXPECT_LT(own_ns - st->on_cpu_ns, 300'000) << "attempt " << attempt;
    }
}

TEST(ThreadCpuState, ASleepingThreadIsNotRunnable)
{
    std::atomic<pid_t> tid{0};
    std::atomic<bool> stop{false};
    std::thread sleeper([&] {
        tid = current_tid();
        while (!stop) std::this_thread::sleep_for(5ms);
    });
    while (tid.load() == 0) std::this_thread::yield();
    // Sampled while it sleeps (it is awake for microseconds every 5 ms).
    bool seen_asleep = false;
    for (int i = 0; i < 50 && !seen_asleep; ++i) {
        const auto st = thread_cpu_state(tid.load());
        ASSERT_TRUE(st.has_value());
        seen_asleep = !st->runnable;
        std::this_thread::sleep_for(1ms);
    }
    stop = true;
    sleeper.join();
    EXPECT_TRUE(seen_asleep);
}

TEST(ThreadCpuState, AThreadThatEndedHasNoState)
{
    std::atomic<pid_t> tid{0};
    std::thread([&] { tid = current_tid(); }).join();
    EXPECT_FALSE(thread_cpu_state(tid.load()).has_value());
    EXPECT_FALSE(thread_cpu_state(0).has_value());
    EXPECT_FALSE(thread_cpu_state(-1).has_value());
}

TEST(ThreadCpuState, TheThreadIdIsTheKernels)
{
    EXPECT_EQ(current_tid(), gettid());
    pid_t other = 0;
    std::thread([&] { other = current_tid(); }).join();
    EXPECT_NE(other, current_tid());
}

}  // namespace
}  // namespace iwemu::test
