// RFC 7306 Atomic Operations between two emulators over real TCP: the
// arithmetic of §5.1 (masks included), verbs FetchAdd and CmpSwap end to end
// (direct, through a re-segmenting proxy, with markers), their order against
// Reads, their atomicity across QPs, and the checks a requester makes before
// anything goes out.  The Terminate paths are in error_path_test.cpp.
#include <algorithm>
#include <cstring>
#include <thread>

#include "emulator/qp/atomic_ops.h"
#include "tests/emulator/qp_loopback_fixture.h"

namespace iwemu::test {
namespace {

constexpr uint32_t atomic_target = access_local_write | access_remote_atomic;
constexpr uint64_t all_ones = ~uint64_t{0};

// A target word as the responder's engine thread left it: it changes the
// word with atomic instructions and nothing the test thread waits on (no
// completion at the responder) orders that for ThreadSanitizer.
uint64_t load(const uint64_t& word) { return __atomic_load_n(&word, __ATOMIC_ACQUIRE); }

// ---- §5.1 arithmetic ------------------------------------------------------

TEST(AtomicArithmetic, FetchAddWithoutMaskIsOnePlainAdd)
{
    EXPECT_EQ(fetch_add_result(41, 1, 0), 42u);
    EXPECT_EQ(fetch_add_result(all_ones, 1, 0), 0u);  // carry out of bit 63 dropped
    EXPECT_EQ(fetch_add_result(0x00000000FFFFFFFFull, 1, 0), 0x0000000100000000ull);
    EXPECT_EQ(fetch_add_result(5, all_ones, 0), 4u);  // two's complement subtract
}

TEST(AtomicArithmetic, FetchAddMaskSplitsIndependentFields)
{
    // Bit 31 ends the low 32-bit field: its carry does not reach bit 32.
    constexpr uint64_t two_halves = 1ull << 31 | 1ull << 63;
    EXPECT_EQ(fetch_add_result(0x00000001FFFFFFFFull, 0x0000000100000001ull, two_halves), 0x0000000200000000ull);
    // Eight byte-wide counters, each wrapping on its own.
    constexpr uint64_t bytes = 0x8080808080808080ull;
    EXPECT_EQ(fetch_add_result(0x01FF7F80000000FFull, 0x0101010101010101ull, bytes), 0x0200808101010100ull);
    // Every bit its own field: add without carries = XOR.
    EXPECT_EQ(fetch_add_result(0xF0F0, 0xFF00, all_ones), 0xF0F0u ^ 0xFF00u);
    // The same result as field-by-field addition, on a spread of values.
    uint64_t x = 12345;
    for (int i = 0; i < 1000; ++i) {
        x = x * 6364136223846793005ull + 1442695040888963407ull;
        const uint64_t a = x, b = x * 31 + 7, m = (x >> 7) & (x >> 19);
        uint64_t expect = 0, carry = 0;
        for (int bit = 0; bit < 64; ++bit) {
            const uint64_t v = (a >> bit & 1) + (b >> bit & 1) + carry;
            expect |= (v & 1) << bit;
            carry = (m >> bit & 1) ? 0 : v >> 1;
        }
        ASSERT_EQ(fetch_add_result(a, b, m), expect) << i;
    }
}

TEST(AtomicArithmetic, CompareSwapHonoursBothMasks)
{
    EXPECT_EQ(compare_swap_result(7, 7, all_ones, 9, all_ones), 9u);
    EXPECT_EQ(compare_swap_result(7, 8, all_ones, 9, all_ones), 7u);
    // Only the compare-masked bits must match; only the swap-masked bits change.
    EXPECT_EQ(compare_swap_result(0x12FF, 0x1200, 0xFF00, 0xAB00, 0xFF00), 0xABFFu);
    EXPECT_EQ(compare_swap_result(0x13FF, 0x1200, 0xFF00, 0xAB00, 0xFF00), 0x13FFu);
    EXPECT_EQ(compare_swap_result(5, 123, 0, 6, all_ones), 6u);  // compare mask 0: always swaps
}

TEST(AtomicArithmetic, VerbsOperandsAreTheWireDefaults)
{
    // WIRE.md §8.6 / VECTORS V-X2: FetchAdd Add Mask 0, Compare Mask all ones.
    EXPECT_EQ(verbs_fetch_add(3), (AtomicOperands{0, 3, 0, 0, all_ones}));
    EXPECT_EQ(verbs_compare_swap(4, 5), (AtomicOperands{2, 5, all_ones, 4, all_ones}));
    EXPECT_TRUE(atomic_opcode_supported(0) && atomic_opcode_supported(2));
    EXPECT_FALSE(atomic_opcode_supported(1) || atomic_opcode_supported(3) || atomic_opcode_supported(15));
}

TEST(AtomicArithmetic, UnalignedHostWordTakesTheLockPath)
{
    alignas(8) uint8_t buf[24] = {};
    uint8_t* word = buf + 3;
    const uint64_t v = 0x0102030405060708ull;
    std::memcpy(word, &v, 8);
    EXPECT_EQ(apply_atomic(word, verbs_fetch_add(0x10)), v);
    uint64_t now;
    std::memcpy(&now, word, 8);
    EXPECT_EQ(now, v + 0x10);
    EXPECT_EQ(apply_atomic(word, verbs_compare_swap(1, 2)), v + 0x10);  // no match: unchanged
    std::memcpy(&now, word, 8);
    EXPECT_EQ(now, v + 0x10);
    EXPECT_EQ(buf[0] | buf[1] | buf[2] | buf[11] | buf[12], 0);  // nothing outside the 8 octets
}

// ---- end to end -------------------------------------------------------------

struct AtomicCase {
    const char* name;
    size_t proxy_chunk;
    bool markers;
};
void PrintTo(const AtomicCase& c, std::ostream* os) { *os << c.name; }

class Atomics : public ::testing::TestWithParam<AtomicCase> {
protected:
    void SetUp() override
    {
        PairOptions o;
        o.proxy_chunk = GetParam().proxy_chunk;
        o.markers_a_to_b = o.markers_b_to_a = GetParam().markers;
        p = std::make_unique<LoopbackPair>(o);
        tmr = p->b->reg(target.data(), target.size() * sizeof(uint64_t), atomic_target);
        rmr = p->a->reg(result.data(), result.size() * sizeof(uint64_t));
    }
    uint64_t taddr(size_t i = 0) { return reinterpret_cast<uint64_t>(&target[i]); }

    std::vector<uint64_t> target = std::vector<uint64_t>(64, 0), result = std::vector<uint64_t>(512, 0);
    std::unique_ptr<LoopbackPair> p;
    MemoryRegion* tmr = nullptr;
    MemoryRegion* rmr = nullptr;
};

TEST_P(Atomics, FetchAddReturnsTheOriginalAndAdds)
{
    target[1] = 41;
    result[0] = 0xEEEEEEEEEEEEEEEEull;
    ASSERT_EQ(p->a->post_atomic(WrOpcode::atomic_fetch_and_add, &result[0], rmr, 7, taddr(1), tmr->rkey(), 1), 0);
    const auto c = p->a->wait(p->a->scq, 1);
    ASSERT_EQ(c.size(), 1u);
    EXPECT_EQ(c[0].status, WcStatus::success);
    EXPECT_EQ(c[0].wr_id, 7u);
    EXPECT_EQ(c[0].opcode, WcOpcode::fetch_add);
    EXPECT_EQ(c[0].byte_len, 8u);
    EXPECT_EQ(result[0], 41u);  // host order, as verbs hands it over
    EXPECT_EQ(load(target[1]), 42u);
    EXPECT_EQ(load(target[0]) | load(target[2]), 0u);
    // Nothing for the responder's application, and both stay up.
    EXPECT_TRUE(p->b->wait(p->b->rcq, 1, 10ms).empty());
    EXPECT_TRUE(p->b->wait(p->b->scq, 1, 10ms).empty());
    EXPECT_EQ(p->a->qp->state(), QpState::rts);
    EXPECT_EQ(p->b->qp->state(), QpState::rts);
}

TEST_P(Atomics, CompareSwapSwapsOnlyOnAMatch)
{
    target[0] = 0x1111222233334444ull;
    ASSERT_EQ(p->a->post_atomic(WrOpcode::atomic_cmp_and_swp, &result[0], rmr, 1, taddr(), tmr->rkey(),
                                0x1111222233334444ull, 0x5555666677778888ull),
              0);
    ASSERT_EQ(p->a->post_atomic(WrOpcode::atomic_cmp_and_swp, &result[1], rmr, 2, taddr(), tmr->rkey(),
                                0x1111222233334444ull, 0x9999ull),
              0);
    const auto c = p->a->wait(p->a->scq, 2);
    ASSERT_EQ(c.size(), 2u);
    for (int i = 0; i < 2; ++i) {
        EXPECT_EQ(c[i].status, WcStatus::success);
        EXPECT_EQ(c[i].wr_id, static_cast<uint64_t>(i + 1));
        EXPECT_EQ(c[i].opcode, WcOpcode::comp_swap);
        EXPECT_EQ(c[i].byte_len, 8u);
    }
    EXPECT_EQ(result[0], 0x1111222233334444ull);
    EXPECT_EQ(result[1], 0x5555666677778888ull);  // the second compare failed ...
    EXPECT_EQ(load(target[0]), 0x5555666677778888ull);  // ... and changed nothing
}

// Many outstanding at once (more than ORD): they execute and complete in
// posting order, unsignaled ones included.
TEST_P(Atomics, PipelineCompletesInOrder)
{
    constexpr int n = 200;  // the SQ holds 256
    for (int i = 0; i < n; ++i)
        ASSERT_EQ(p->a->post_atomic(WrOpcode::atomic_fetch_and_add, &result[i], rmr, i, taddr(2), tmr->rkey(), 3,
                                    0, i % 4 == 3 ? send_signaled : 0),
                  0);
    const auto c = p->a->wait(p->a->scq, n / 4);
    ASSERT_EQ(c.size(), static_cast<size_t>(n / 4));
    for (int k = 0; k < n / 4; ++k) {
        EXPECT_EQ(c[k].status, WcStatus::success);
        EXPECT_EQ(c[k].wr_id, static_cast<uint64_t>(4 * k + 3));
    }
    EXPECT_TRUE(p->a->wait(p->a->scq, 1, 10ms).empty());
    EXPECT_EQ(load(target[2]), 3u * n);
    for (int i = 0; i < n; ++i) EXPECT_EQ(result[i], 3u * i) << i;
}

INSTANTIATE_TEST_SUITE_P(Wire, Atomics,
                         ::testing::Values(AtomicCase{"direct", 0, false}, AtomicCase{"proxy_split", 5, false},
                                           AtomicCase{"proxy_markers", 64, true}),
                         [](const ::testing::TestParamInfo<AtomicCase>& i) { return std::string(i.param.name); });

// Responses leave in request order (EXT-007) and the operation happens in
// that order too: a Read posted before an atomic sees the value before it,
// one posted after sees its result.  The large Read makes the earlier Read
// Response still unsent (TCP reads its source at sendmsg) when the atomic's
// turn comes.
TEST(AtomicOrdering, ReadsBeforeSeeTheOldValueReadsAfterTheNew)
{
    PairOptions o;
    o.ird = o.ord = 64;
    LoopbackPair p(o);
    constexpr size_t big = 1 << 20;
    std::vector<uint64_t> region(big / 8, 0);
    std::vector<uint64_t> local(big / 8 * 2 + 64, 0);
    auto* tmr = p.b->reg(region.data(), big, access_local_write | access_remote_read | access_remote_atomic);
    auto* lmr = p.a->reg(local.data(), local.size() * 8);
    uint64_t* const word = &region.back();  // the last word of the large Read
    const uint64_t waddr = reinterpret_cast<uint64_t>(word);
    *word = 1000;  // then only changed by the atomics: each round adds 100
    for (int round = 0; round < 20; ++round) {
        const uint64_t base = 1000 + 100u * round;
        std::fill(local.begin(), local.end(), 0);
        uint64_t* big_read = local.data();
        uint64_t* small = local.data() + big / 8;
        uint64_t* orig = small + 8;
        // Read everything, FetchAdd, read the word, CmpSwap, read it again.
        ASSERT_EQ(p.a->post_send(WrOpcode::rdma_read, big_read, big, lmr, 1, reinterpret_cast<uint64_t>(region.data()),
                                 tmr->rkey()),
                  0);
        ASSERT_EQ(p.a->post_atomic(WrOpcode::atomic_fetch_and_add, &orig[0], lmr, 2, waddr, tmr->rkey(), 5), 0);
        ASSERT_EQ(p.a->post_send(WrOpcode::rdma_read, &small[0], 8, lmr, 3, waddr, tmr->rkey()), 0);
        ASSERT_EQ(p.a->post_atomic(WrOpcode::atomic_cmp_and_swp, &orig[1], lmr, 4, waddr, tmr->rkey(), base + 5,
                                   base + 100),
                  0);
        ASSERT_EQ(p.a->post_send(WrOpcode::rdma_read, &small[1], 8, lmr, 5, waddr, tmr->rkey()), 0);
        const auto c = p.a->wait(p.a->scq, 5);
        ASSERT_EQ(c.size(), 5u);
        for (int i = 0; i < 5; ++i) {
            EXPECT_EQ(c[i].status, WcStatus::success);
            EXPECT_EQ(c[i].wr_id, static_cast<uint64_t>(i + 1));
        }
        EXPECT_EQ(big_read[big / 8 - 1], base) << round;  // before the FetchAdd
        EXPECT_EQ(orig[0], base);
        EXPECT_EQ(small[0], base + 5) << round;
        EXPECT_EQ(orig[1], base + 5);
        EXPECT_EQ(small[1], base + 100) << round;
        EXPECT_EQ(load(*word), base + 100);
    }
}

// EXT-011: atomic with respect to every other atomic of the emulator.  Two
// QPs (from two requester emulators) hammer one word of a third: the sum is
// exact and every original value appears exactly once.
TEST(AtomicAtomicity, TwoQpsHammeringOneWord)
{
    PairOptions o;
    o.ird = o.ord = 32;
    LoopbackPair p(o);
    Side c(o.config);  // a second requester, on its own emulator
    QueuePair* b2 = nullptr;
    {
        QpInitAttr ia;
        ia.send_cq = p.b->scq;
        ia.recv_cq = p.b->rcq;
        ia.cap = {16, 16, 1, 1, 0};
        ASSERT_EQ(p.b->emu->create_qp(p.b->pd, ia, &b2), 0);
        QpAttr at;
        at.qp_state = QpState::init;
        at.qp_access_flags = access_remote_atomic;
        at.max_dest_rd_atomic = 32;
        ASSERT_EQ(b2->modify(at, qp_attr_state | qp_attr_access_flags | qp_attr_max_dest_rd_atomic), 0);
        QpAttr ac;
        ac.max_rd_atomic = 32;
        ASSERT_EQ(c.qp->modify(ac, qp_attr_max_qp_rd_atomic), 0);
        ASSERT_EQ(attach_tcp_pair(c.qp, b2), 0);
    }
    alignas(64) uint64_t word = 0;
    auto* tmr = p.b->reg(&word, sizeof word, atomic_target);
    constexpr int n = 3000;
    std::vector<uint64_t> ra(n), rc(n);
    auto* amr = p.a->reg(ra.data(), n * 8);
    auto* cmr = c.reg(rc.data(), n * 8);
    auto hammer = [&](Side& s, MemoryRegion* mr, std::vector<uint64_t>& r) {
        int done = 0;
        for (int i = 0; i < n; ++i) {
            // Keep at most 64 outstanding (SQ 256, send CQ 4096).
            while (i - done >= 64) done += static_cast<int>(s.wait(s.scq, 1, 5s).size());
            ASSERT_EQ(s.post_atomic(WrOpcode::atomic_fetch_and_add, &r[i], mr, i, reinterpret_cast<uint64_t>(&word),
                                    tmr->rkey(), 1),
                      0);
        }
        while (done < n) {
            const auto got = s.wait(s.scq, 1, 10s);
            ASSERT_FALSE(got.empty());
            for (auto& wc : got) ASSERT_EQ(wc.status, WcStatus::success);
            done += static_cast<int>(got.size());
        }
    };
    std::thread ta([&] { hammer(*p.a, amr, ra); });
    std::thread tc([&] { hammer(c, cmr, rc); });
    ta.join();
    tc.join();
    EXPECT_EQ(load(word), 2u * n);
    std::vector<uint64_t> all(ra);
    all.insert(all.end(), rc.begin(), rc.end());
    std::sort(all.begin(), all.end());
    for (size_t i = 0; i < all.size(); ++i) ASSERT_EQ(all[i], i) << "original values must be 0 .. 2n-1 once each";
    // Each QP's own results rise: its requests ran in its posting order.
    EXPECT_TRUE(std::is_sorted(ra.begin(), ra.end()));
    EXPECT_TRUE(std::is_sorted(rc.begin(), rc.end()));
}

// ---- checks before anything goes out ----------------------------------------

TEST(AtomicRequester, RefusesWhatRxeRefusesAtPostTime)
{
    LoopbackPair p;
    std::vector<uint64_t> t(4), r(4);
    auto* tmr = p.b->reg(t.data(), 32, atomic_target);
    auto* rmr = p.a->reg(r.data(), 32);
    const uint64_t ta = reinterpret_cast<uint64_t>(t.data());
    // Target not 64-bit aligned (RFC 7306 §5.1): EINVAL, as rxe.
    EXPECT_EQ(p.a->post_atomic(WrOpcode::atomic_fetch_and_add, &r[0], rmr, 1, ta + 4, tmr->rkey(), 1), EINVAL);
    // Not exactly 8 octets of result buffer; inline.
    for (uint32_t len : {0u, 4u, 16u}) {
        Sge sge{reinterpret_cast<uint64_t>(r.data()), len, rmr->lkey()};
        SendWr wr;
        wr.opcode = WrOpcode::atomic_cmp_and_swp;
        wr.sg_list = &sge;
        wr.num_sge = len ? 1 : 0;
        wr.remote_addr = ta;
        wr.rkey = tmr->rkey();
        size_t bad = 99;
        EXPECT_EQ(p.a->qp->post_send(&wr, 1, &bad), EINVAL) << len;
        EXPECT_EQ(bad, 0u);
    }
    EXPECT_EQ(p.a->post_atomic(WrOpcode::atomic_fetch_and_add, &r[0], rmr, 1, ta, tmr->rkey(), 1, 0,
                               send_signaled | send_inline),
              EINVAL);
    // 8 octets in two SGEs are fine: the original value spans them.
    Sge two[2] = {{reinterpret_cast<uint64_t>(&r[1]), 3, rmr->lkey()}, {reinterpret_cast<uint64_t>(&r[2]), 5, rmr->lkey()}};
    t[0] = 0x0807060504030201ull;
    SendWr wr;
    wr.wr_id = 9;
    wr.opcode = WrOpcode::atomic_fetch_and_add;
    wr.send_flags = send_signaled;
    wr.sg_list = two;
    wr.num_sge = 2;
    wr.remote_addr = ta;
    wr.rkey = tmr->rkey();
    wr.compare_add = 1;
    size_t bad;
    ASSERT_EQ(p.a->qp->post_send(&wr, 1, &bad), 0);
    const auto c = p.a->wait(p.a->scq, 1);
    ASSERT_EQ(c.size(), 1u);
    EXPECT_EQ(c[0].status, WcStatus::success);
    uint8_t got[8];
    std::memcpy(got, &r[1], 3);
    std::memcpy(got + 3, &r[2], 5);
    uint64_t v;
    std::memcpy(&v, got, 8);
    EXPECT_EQ(v, 0x0807060504030201ull);
    EXPECT_EQ(load(t[0]), 0x0807060504030202ull);
    EXPECT_EQ(p.a->qp->state(), QpState::rts);
}

// The result buffer must be writable: a local access error, as for a Read.
TEST(AtomicRequester, ResultBufferWithoutLocalWrite)
{
    LoopbackPair p;
    std::vector<uint64_t> t(1), r(1);
    auto* tmr = p.b->reg(t.data(), 8, atomic_target);
    auto* rmr = p.a->reg(r.data(), 8, access_remote_read);
    ASSERT_EQ(p.a->post_atomic(WrOpcode::atomic_fetch_and_add, &r[0], rmr, 1, reinterpret_cast<uint64_t>(t.data()),
                               tmr->rkey(), 1),
              0);
    const auto c = p.a->wait(p.a->scq, 1);
    ASSERT_EQ(c.size(), 1u);
    EXPECT_EQ(c[0].status, WcStatus::loc_access_err);
    EXPECT_EQ(c[0].opcode, WcOpcode::fetch_add);
    EXPECT_EQ(load(t[0]), 0u);
}

TEST(AtomicRequester, RefusedWhenRfc7306IsOff)
{
    PairOptions o;
    o.config.rfc7306 = false;
    LoopbackPair p(o);
    std::vector<uint64_t> t(1), r(1);
    auto* tmr = p.b->reg(t.data(), 8, atomic_target);
    auto* rmr = p.a->reg(r.data(), 8);
    for (WrOpcode op : {WrOpcode::atomic_cmp_and_swp, WrOpcode::atomic_fetch_and_add})
        EXPECT_EQ(p.a->post_atomic(op, &r[0], rmr, 1, reinterpret_cast<uint64_t>(t.data()), tmr->rkey(), 1),
                  EOPNOTSUPP);
    EXPECT_EQ(p.a->emu->device_attributes().atomic_cap, atomic_cap_none);
    LoopbackPair on;
    EXPECT_EQ(on.a->emu->device_attributes().atomic_cap, atomic_cap_hca);
}

}  // namespace
}  // namespace iwemu::test
