// What one QP and one CQ cost in heap, measured (glibc mallinfo2: heap
// growth per object), so scale_bench's "queue buffer bytes" (the per-entry
// sizes in tests/bench/scale_queue_bytes.h) cannot drift from the emulator,
// and the fixed per-QP cost stays small enough for thousands of QPs
// (issue 5: < 64 KiB per QP beyond its queue buffers).
#include <malloc.h>

#include <cstdio>
#include <vector>

#include "tests/bench/scale_queue_bytes.h"
#include "tests/emulator/qp_loopback_fixture.h"

namespace iwemu::test {
namespace {

size_t heap_in_use()
{
    const struct mallinfo2 mi = mallinfo2();
    return mi.uordblks + mi.hblkhd;
}

class ScaleMemory : public ::testing::Test {
protected:
    void SetUp() override
    {
        ASSERT_EQ(emu_.alloc_pd(&pd_), 0);
        ASSERT_EQ(emu_.create_cq(16, &cq_), 0);
        // The first QP opens the QP-number endpoint (a listening socket, a
        // CM): not a per-QP cost.
        QpInitAttr ia{cq_, cq_, nullptr, {1, 1, 1, 1, 0}};
        QueuePair* qp = nullptr;
        ASSERT_EQ(emu_.create_qp(pd_, ia, &qp), 0);
        ASSERT_EQ(emu_.destroy_qp(qp), 0);
        const size_t a = heap_in_use();
        void* volatile p = std::malloc(4096);  // volatile: the pair must not be optimised away
        const size_t b = heap_in_use();
        std::free(p);
        if (b <= a) GTEST_SKIP() << "mallinfo2 does not count allocations here (sanitizer build?)";
    }
    void TearDown() override
    {
        if (cq_) emu_.destroy_cq(cq_);
        if (pd_) emu_.dealloc_pd(pd_);
    }

    // Heap bytes create_qp keeps for these caps.
    double qp_bytes(uint32_t send_wr, uint32_t send_sge, uint32_t inline_data, uint32_t recv_wr)
    {
        QpInitAttr ia{cq_, cq_, nullptr, {send_wr, recv_wr, send_sge, 1, inline_data}};
        QueuePair* qp = nullptr;
        const size_t before = heap_in_use();
        EXPECT_EQ(emu_.create_qp(pd_, ia, &qp), 0);
        const size_t after = heap_in_use();
        EXPECT_EQ(emu_.destroy_qp(qp), 0);
        return static_cast<double>(after) - static_cast<double>(before);
    }
    double cq_bytes(uint32_t cqe)
    {
        CompletionQueue* cq = nullptr;
        const size_t before = heap_in_use();
        EXPECT_EQ(emu_.create_cq(cqe, &cq), 0);
        const size_t after = heap_in_use();
        EXPECT_EQ(emu_.destroy_cq(cq), 0);
        return static_cast<double>(after) - static_cast<double>(before);
    }

    Emulator emu_{Config{}};
    ProtectionDomain* pd_ = nullptr;
    CompletionQueue* cq_ = nullptr;
};

constexpr uint32_t k = 16384;  // entries added: allocator page rounding and noise vanish per entry

TEST_F(ScaleMemory, PerEntrySizesMatchTheBenchmark)
{
    // Every send WQE holds the device's inline maximum, whatever was asked.
    const double send = (qp_bytes(2 * k, 1, 0, 1) - qp_bytes(k, 1, 0, 1)) / k;
    EXPECT_NEAR(send, scale::send_wqe_bytes + scale::send_sge_bytes + limits::max_inline_data,
                1.0);  // allocator page rounding: < 1 octet per entry
    const double sge = (qp_bytes(k, 3, 0, 1) - qp_bytes(k, 1, 0, 1)) / (2.0 * k);
    EXPECT_NEAR(sge, scale::send_sge_bytes, 1.0);  // allocator page rounding: < 1 octet per entry
    const double inl = (qp_bytes(k, 1, 64, 1) - qp_bytes(k, 1, 0, 1)) / k;
    EXPECT_NEAR(inl, 0.0, 1.0);
    const double recv = (qp_bytes(1, 1, 0, 2 * k) - qp_bytes(1, 1, 0, k)) / k;
    EXPECT_NEAR(recv, scale::recv_wqe_bytes, 1.0);  // allocator page rounding: < 1 octet per entry
    const double cqe = (cq_bytes(2 * k) - cq_bytes(k)) / k;
    EXPECT_NEAR(cqe, scale::cqe_bytes, 1.0);  // allocator page rounding: < 1 octet per entry
}

long rss_kib()
{
    FILE* f = std::fopen("/proc/self/status", "r");
    if (!f) return -1;
    char line[256];
    long v = -1;
    while (std::fgets(line, sizeof line, f))
        if (std::sscanf(line, "VmRSS: %ld kB", &v) == 1) break;
    std::fclose(f);
    return v;
}

// What scale_bench measures through RSS, here without a connection: the
// resident cost of a QP (16 send and 16 receive WQEs, one SGE, no inline
// asked for: the device's 256 octets granted)
// with its own CQ of 32, beyond those queue buffers.  malloc_trim first, so
// freed memory of earlier tests is not reused already resident.
TEST_F(ScaleMemory, ResidentCostPerQpIsSmall)
{
    constexpr int n = 256;
    std::vector<CompletionQueue*> cqs(n, nullptr);
    std::vector<QueuePair*> qps(n, nullptr);
    malloc_trim(0);
    const size_t heap_before = heap_in_use();
    const long before = rss_kib();
    for (int i = 0; i < n; ++i) {
        ASSERT_EQ(emu_.create_cq(32, &cqs[i]), 0);
        QpInitAttr ia{cqs[i], cqs[i], nullptr, {16, 16, 1, 1, 0}};
        ASSERT_EQ(emu_.create_qp(pd_, ia, &qps[i]), 0);
    }
    const long after = rss_kib();
    const double heap = (static_cast<double>(heap_in_use()) - static_cast<double>(heap_before)) / n;
    for (int i = 0; i < n; ++i) {
        EXPECT_EQ(emu_.destroy_qp(qps[i]), 0);
        EXPECT_EQ(emu_.destroy_cq(cqs[i]), 0);
    }
    ASSERT_GT(before, 0);
    const double queues = static_cast<double>(scale::queue_buffer_bytes(16, 1, limits::max_inline_data, 16, 32));
    const double resident = static_cast<double>(after - before) * 1024.0 / n;
    std::printf("QP 16/16 + CQ 32: %.0f heap bytes, %.0f resident, %.0f of them queue buffers\n", heap, resident,
                queues);
    EXPECT_LT(resident - queues, 64.0 * 1024);
}

}  // namespace
}  // namespace iwemu::test
