// Memory windows (emulator/qp/memory_window.cpp): the STag table's checks of a
// bind and of an access through a window, then binds as work requests on a
// connected QP -- remote Write and Read through a window, every bind error
// (mw_bind_err, QP in ERR, Terminate to the peer), the state a bind needs,
// invalidation (local, remote, by dealloc) and the Terminate an invalidated
// or foreign-stream window gets, on both sides.
#include "emulator/wire/terminate_codes.h"
#include "tests/emulator/qp_loopback_fixture.h"

namespace iwemu::test {
namespace {

using wire::TerminateCode;
using wire::TerminateLayer;

constexpr uint32_t kMrAccess = access_local_write | access_mw_bind;
constexpr uint32_t kRemoteRw = access_remote_write | access_remote_read;

constexpr TerminateCode code(uint8_t layer, uint8_t etype, uint8_t ecode)
{
    return {static_cast<TerminateLayer>(layer), etype, ecode};
}

// The window's index with the next key, as ibv_inc_rkey makes it.
uint32_t next_rkey(uint32_t rkey) { return (rkey & ~0xFFu) | ((rkey + 1) & 0xFFu); }

MwBind bind_of(MemoryWindow* mw, MemoryRegion* mr, uint64_t addr, uint64_t length, uint32_t access)
{
    MwBind b;
    b.mw = mw;
    b.mr = mr;
    b.addr = addr;
    b.length = length;
    b.access = access;
    b.rkey = next_rkey(mw->rkey());
    return b;
}

// ---- the table alone -------------------------------------------------------

// An access that should fail: a region it wrongly pinned is released (so a
// failing check cannot hang the deregistration after it); none on success.
StagError refused(StagTable& t, uint32_t stag, const ProtectionDomain* pd, uint32_t access, uint64_t to,
                  uint64_t len, uint64_t stream = 0)
{
    StagError e;
    if (MemoryRegion* got = t.acquire(stag, pd, access, to, len, &e, stream)) StagTable::release(got);
    return e;
}

struct WindowTable : ::testing::Test {
    Emulator emu{Config{}};
    ProtectionDomain* pd = nullptr;
    ProtectionDomain* pd2 = nullptr;
    std::vector<uint8_t> buf = std::vector<uint8_t>(8192);
    uint64_t base = 0;
    MemoryRegion* mr = nullptr;
    void SetUp() override
    {
        ASSERT_EQ(emu.alloc_pd(&pd), 0);
        ASSERT_EQ(emu.alloc_pd(&pd2), 0);
        base = reinterpret_cast<uint64_t>(buf.data());
        ASSERT_EQ(emu.reg_mr(pd, buf.data(), buf.size(), base, kMrAccess, &mr), 0);
    }
    StagTable& t() { return emu.stags(); }
};

TEST_F(WindowTable, DeviceOffersWindows)
{
    const auto& a = emu.device_attributes();
    EXPECT_GT(a.max_mw, 0u);
    EXPECT_TRUE(a.device_cap_flags & (1u << 17));  // IBV_DEVICE_MEM_WINDOW
    EXPECT_TRUE(a.device_cap_flags & (1u << 24));  // IBV_DEVICE_MEM_WINDOW_TYPE_2B
    MemoryWindow* mw;
    EXPECT_EQ(emu.alloc_mw(pd, static_cast<MwType>(3), &mw), EINVAL);
    EXPECT_EQ(emu.alloc_mw(pd, static_cast<MwType>(0), &mw), EINVAL);
    ASSERT_EQ(emu.alloc_mw(pd, MwType::type1, &mw), 0);
    EXPECT_NE(mw->rkey() >> 8, mr->stag() >> 8);  // its own STag
    EXPECT_FALSE(mw->valid());                    // unbound: no access yet
    EXPECT_EQ(emu.dealloc_pd(pd), EBUSY);
    EXPECT_EQ(emu.dealloc_mw(mw), 0);
}

TEST_F(WindowTable, BindChecksAgainstTheRegion)
{
    MemoryWindow* mw;
    ASSERT_EQ(emu.alloc_mw(pd, MwType::type1, &mw), 0);
    MemoryRegion* w = mw->entry();
    const uint32_t before = mw->rkey();
    // C10-73: the region must allow binding.
    MemoryRegion* plain;
    ASSERT_EQ(emu.reg_mr(pd, buf.data(), buf.size(), base, access_local_write, &plain), 0);
    EXPECT_EQ(t().bind_window(w, bind_of(mw, plain, base, 64, kRemoteRw), pd, 1), EACCES);
    // C10-74: remote write over a region without local write.
    MemoryRegion* ro;
    ASSERT_EQ(emu.reg_mr(pd, buf.data(), buf.size(), base, access_mw_bind, &ro), 0);
    EXPECT_EQ(t().bind_window(w, bind_of(mw, ro, base, 64, access_remote_write), pd, 1), EACCES);
    EXPECT_EQ(t().bind_window(w, bind_of(mw, ro, base, 64, access_remote_read), pd, 1), 0);  // read is fine
    // The window's PD must be the region's.
    MemoryRegion* other;
    ASSERT_EQ(emu.reg_mr(pd2, buf.data(), buf.size(), base, kMrAccess, &other), 0);
    EXPECT_EQ(t().bind_window(w, bind_of(mw, other, base, 64, kRemoteRw), pd, 1), EPERM);
    // C10-75: inside the region, no wrap; no zero-based window.
    EXPECT_EQ(t().bind_window(w, bind_of(mw, mr, base + 8000, 193, kRemoteRw), pd, 1), EINVAL);
    EXPECT_EQ(t().bind_window(w, bind_of(mw, mr, base - 1, 2, kRemoteRw), pd, 1), EINVAL);
    EXPECT_EQ(t().bind_window(w, bind_of(mw, mr, ~uint64_t{0} - 2, 8, kRemoteRw), pd, 1), EINVAL);
    EXPECT_EQ(t().bind_window(w, bind_of(mw, mr, base, 64, kRemoteRw | access_zero_based), pd, 1), EINVAL);
    // A bind may change the key, not the index.
    MwBind wrong = bind_of(mw, mr, base, 64, kRemoteRw);
    wrong.rkey ^= 0x100;
    EXPECT_EQ(t().bind_window(w, wrong, pd, 1), EINVAL);
    // A region that is gone.
    MemoryRegion* gone;
    ASSERT_EQ(emu.reg_mr(pd, buf.data(), buf.size(), base, kMrAccess, &gone), 0);
    ASSERT_EQ(emu.dereg_mr(gone), 0);
    EXPECT_EQ(t().bind_window(w, bind_of(mw, gone, base, 64, kRemoteRw), pd, 1), EINVAL);
    // The one good bind above (read only over `ro`) is what the window holds.
    EXPECT_EQ(mw->rkey(), next_rkey(before));
    EXPECT_TRUE(mw->valid());
    EXPECT_EQ(emu.dealloc_mw(mw), 0);
    for (MemoryRegion* m : {plain, ro, other}) EXPECT_EQ(emu.dereg_mr(m), 0);
}

TEST_F(WindowTable, AccessThroughAWindowGivesItsRegionWithinItsRightsAndRange)
{
    MemoryWindow* mw;
    ASSERT_EQ(emu.alloc_mw(pd, MwType::type1, &mw), 0);
    ASSERT_EQ(t().bind_window(mw->entry(), bind_of(mw, mr, base + 1024, 2048, access_remote_write), pd, 1), 0);
    const uint32_t rkey = mw->rkey();
    StagError e;
    MemoryRegion* got = t().acquire(rkey, pd, access_remote_write, base + 1024, 2048, &e, 7);
    ASSERT_EQ(got, mr);  // the region, pinned: placement works on it as for its own STag
    EXPECT_EQ(got->at(base + 1024), buf.data() + 1024);
    StagTable::release(got);
    EXPECT_EQ(refused(t(), rkey, pd, access_remote_read, base + 1024, 8, 7), StagError::access);
    // Inside the region, outside the window.
    EXPECT_EQ(refused(t(), rkey, pd, access_remote_write, base + 1023, 8, 7), StagError::bounds);
    EXPECT_EQ(refused(t(), rkey, pd, access_remote_write, base + 3000, 73, 7), StagError::bounds);
    EXPECT_EQ(refused(t(), rkey, pd2, access_remote_write, base + 1024, 8, 7), StagError::pd_mismatch);
    // A window is no local key.
    EXPECT_EQ(refused(t(), rkey, pd, 0, base + 1024, 8), StagError::invalid_stag);
    EXPECT_NE(refused(t(), rkey, pd, access_local_write, base + 1024, 8), StagError::none);
    EXPECT_EQ(refused(t(), next_rkey(rkey), pd, access_remote_write, base + 1024, 8, 7), StagError::invalid_stag);
    // The region cannot go or change under a bound window (IBA 10.6.7.2.6).
    EXPECT_EQ(emu.dereg_mr(mr), EINVAL);
    EXPECT_EQ(emu.rereg_mr(mr, pd, buf.data(), 100, base, kMrAccess), EINVAL);
    // Type 1: rebinding moves it (the old key dies); no length unbinds it.
    ASSERT_EQ(t().bind_window(mw->entry(), bind_of(mw, mr, base, 16, kRemoteRw), pd, 1), 0);
    EXPECT_NE(refused(t(), rkey, pd, access_remote_write, base + 1024, 8, 7), StagError::none);
    got = t().acquire(mw->rkey(), pd, access_remote_read, base, 16, &e, 9);
    ASSERT_EQ(got, mr);
    StagTable::release(got);
    // Type 1 is not invalidated by Local Invalidate / Send with Invalidate (o10-37.2.26).
    EXPECT_EQ(t().invalidate(mw->rkey(), pd), StagError::invalid_stag);
    EXPECT_TRUE(mw->valid());
    ASSERT_EQ(t().bind_window(mw->entry(), bind_of(mw, nullptr, 0, 0, 0), pd, 1), 0);
    EXPECT_FALSE(mw->valid());
    EXPECT_NE(refused(t(), mw->rkey(), pd, access_remote_read, base, 1, 9), StagError::none);
    EXPECT_EQ(emu.dereg_mr(mr), 0);  // unbound: the region may go
    mr = nullptr;
    EXPECT_EQ(emu.dealloc_mw(mw), 0);
}

TEST_F(WindowTable, TypeTwoBelongsToItsStream)
{
    MemoryWindow* mw;
    ASSERT_EQ(emu.alloc_mw(pd, MwType::type2, &mw), 0);
    constexpr uint64_t stream = 42;
    // o10-37.2.40: a type 2 window is not bound with no length; C10-72: the QP's PD.
    EXPECT_EQ(t().bind_window(mw->entry(), bind_of(mw, mr, base, 0, kRemoteRw), pd, stream), EINVAL);
    EXPECT_EQ(t().bind_window(mw->entry(), bind_of(mw, mr, base, 64, kRemoteRw), pd2, stream), EPERM);
    const MwBind b = bind_of(mw, mr, base, 64, kRemoteRw);
    ASSERT_EQ(t().bind_window(mw->entry(), b, pd, stream), 0);
    EXPECT_EQ(t().bind_window(mw->entry(), b, pd, stream), EINVAL);  // o10-37.2.30: bound, not free
    StagError e;
    MemoryRegion* got = t().acquire(b.rkey, pd, access_remote_write, base, 64, &e, stream);
    ASSERT_EQ(got, mr);
    StagTable::release(got);
    // "STag not associated with the stream".
    EXPECT_EQ(refused(t(), b.rkey, pd, access_remote_write, base, 64, stream + 1), StagError::pd_mismatch);
    // A remote invalidation must come over its stream; a local one from any QP of the PD.
    EXPECT_EQ(t().invalidate(b.rkey, pd, stream + 1), StagError::pd_mismatch);
    EXPECT_EQ(t().invalidate(b.rkey, pd2), StagError::pd_mismatch);
    EXPECT_EQ(t().invalidate(b.rkey, pd, stream), StagError::none);
    EXPECT_EQ(t().invalidate(b.rkey, pd), StagError::invalid_stag);  // once
    EXPECT_EQ(refused(t(), b.rkey, pd, access_remote_write, base, 64, stream), StagError::invalid_stag);
    EXPECT_EQ(emu.dereg_mr(mr), 0);  // invalidation unbound it
    mr = nullptr;
    EXPECT_EQ(emu.dealloc_mw(mw), 0);
}

TEST_F(WindowTable, DeallocInvalidatesAndTheSlotComesBackWithAnotherKey)
{
    MemoryWindow* mw;
    ASSERT_EQ(emu.alloc_mw(pd, MwType::type2, &mw), 0);
    const MwBind b = bind_of(mw, mr, base, 64, kRemoteRw);
    ASSERT_EQ(t().bind_window(mw->entry(), b, pd, 5), 0);
    MemoryRegion* entry = mw->entry();
    ASSERT_EQ(emu.dealloc_mw(mw), 0);
    EXPECT_EQ(refused(t(), b.rkey, pd, access_remote_write, base, 64, 5), StagError::invalid_stag);
    // A bind queued for the freed window fails instead of touching it.
    EXPECT_EQ(t().bind_window(entry, b, pd, 5), EINVAL);
    MemoryRegion* again;
    ASSERT_EQ(emu.reg_mr(pd, buf.data(), 64, base, access_local_write | access_remote_write, &again), 0);
    EXPECT_EQ(again->stag() >> 8, b.rkey >> 8);  // the slot, reused by a region
    EXPECT_NE(again->stag(), b.rkey);
    EXPECT_NE(refused(t(), b.rkey, pd, access_remote_write, base, 64, 5), StagError::none);
    EXPECT_EQ(t().bind_window(entry, b, pd, 5), EINVAL);  // a region now, not a window
    EXPECT_EQ(emu.dereg_mr(again), 0);
    EXPECT_EQ(emu.dereg_mr(mr), 0);
    mr = nullptr;
    EXPECT_EQ(t().windows(), 0u);
}

// Lookups through a window racing with its rebinds and invalidations: every
// lookup that succeeds hands back the region, pinned, inside the window's
// range as some bind set it; no pin is lost (the deregistration at the end
// would wait forever) and the rebinding thread never waits on a lookup for long.
TEST_F(WindowTable, LookupsRacingWithBindsAndInvalidations)
{
    MemoryWindow* mw;
    ASSERT_EQ(emu.alloc_mw(pd, MwType::type2, &mw), 0);
    const uint32_t index = mw->rkey() & ~0xFFu;
    std::atomic<bool> stop{false};
    std::atomic<uint64_t> hits{0}, misses{0}, wrong{0};
    std::thread reader([&] {
        uint32_t key = 0;
        while (!stop.load(std::memory_order_relaxed)) {
            StagError e;
            // Any key: the reader does not know which one is bound now.
            MemoryRegion* got = t().acquire(index | (key++ & 0xFF), pd, access_remote_write, base + 512, 256, &e, 9);
            if (!got) {
                misses.fetch_add(1, std::memory_order_relaxed);
                continue;
            }
            if (got != mr || !got->contains(base + 512, 256)) wrong.fetch_add(1, std::memory_order_relaxed);
            hits.fetch_add(1, std::memory_order_relaxed);
            StagTable::release(got);
        }
    });
    MwBind b = bind_of(mw, mr, base, 1024, access_remote_write);
    ASSERT_TRUE(wait_until([&] { return misses.load() > 0; }, 5s));  // the reader runs
    const auto end = std::chrono::steady_clock::now() + 5s;
    for (int i = 0; i < 20000 || (hits.load() < 100 && std::chrono::steady_clock::now() < end); ++i) {
        b.rkey = next_rkey(b.rkey);
        b.addr = base + (i % 2 ? 0 : 256);  // both ranges hold [512, 768)
        ASSERT_EQ(t().bind_window(mw->entry(), b, pd, 9), 0);
        ASSERT_EQ(t().invalidate(b.rkey, pd, 9), StagError::none);
    }
    stop = true;
    reader.join();
    EXPECT_EQ(wrong.load(), 0u);
    EXPECT_GE(hits.load(), 100u);
    EXPECT_EQ(emu.dealloc_mw(mw), 0);
    EXPECT_EQ(emu.dereg_mr(mr), 0);  // returns: no pin was lost
    mr = nullptr;
}

TEST_F(WindowTable, AtMostMaxMw)
{
    StagTable small(16, 1, 3);
    MemoryWindow* mw[4];
    for (int i = 0; i < 3; ++i) ASSERT_EQ(small.allocate_window(pd, MwType::type1, &mw[i]), 0);
    EXPECT_EQ(small.allocate_window(pd, MwType::type1, &mw[3]), ENOMEM);
    small.free_window(mw[0]);
    ASSERT_EQ(small.allocate_window(pd, MwType::type2, &mw[3]), 0);
    for (int i = 1; i < 4; ++i) small.free_window(mw[i]);
}

// ---- binds as work requests on a connected QP ------------------------------

int post_bind(Side& s, const MwBind& b, uint64_t wr_id, uint32_t flags = send_signaled, QueuePair* qp = nullptr)
{
    SendWr wr;
    wr.wr_id = wr_id;
    wr.opcode = WrOpcode::bind_mw;
    wr.send_flags = flags;
    wr.num_sge = 0;
    wr.bind = b;
    size_t bad;
    return (qp ? qp : s.qp)->post_send(&wr, 1, &bad);
}

// A's memory, a window over part of it, B's buffers.
struct WindowPair {
    // The buffers before the pair: the endpoints (and their threads) go first.
    std::vector<uint8_t> mem = std::vector<uint8_t>(8192);  // on a
    std::vector<uint8_t> src = std::vector<uint8_t>(4096), dst = std::vector<uint8_t>(4096);  // on b
    LoopbackPair p;
    MemoryRegion* mr = nullptr;
    MemoryRegion* smr = nullptr;
    MemoryRegion* dmr = nullptr;
    MemoryWindow* mw = nullptr;
    explicit WindowPair(MwType type, uint32_t mr_access = kMrAccess)
    {
        mr = p.a->reg(mem.data(), mem.size(), mr_access);
        smr = p.b->reg(src.data(), src.size());
        dmr = p.b->reg(dst.data(), dst.size());
        EXPECT_EQ(p.a->emu->alloc_mw(p.a->pd, type, &mw), 0);
    }
    // A test that did not deallocate its window leaves it to the pair, as
    // closing a context does (LeakSanitizer).
    ~WindowPair()
    {
        if (mw) p.a->emu->dealloc_mw(mw);
    }
    uint64_t at(size_t off) const { return reinterpret_cast<uint64_t>(mem.data() + off); }
};

// The bind failed: mw_bind_err, A in ERR with a Terminate (local
// catastrophic) that takes B down too, and A's next WR flushed.
void expect_bind_error(WindowPair& w, uint64_t wr_id)
{
    auto c = w.p.a->wait(w.p.a->scq, 1);
    ASSERT_EQ(c.size(), 1u);
    EXPECT_EQ(c[0].wr_id, wr_id);
    EXPECT_EQ(c[0].opcode, WcOpcode::bind_mw);
    EXPECT_EQ(c[0].status, WcStatus::mw_bind_err);
    ASSERT_TRUE(w.p.a->wait_state(QpState::err));
    ASSERT_TRUE(w.p.b->wait_state(QpState::err));
    EXPECT_EQ(w.p.b->qp->last_terminate_received().code, code(0, 0, 0));
    EXPECT_FALSE(w.mw->valid());
    ASSERT_EQ(w.p.a->post_send(WrOpcode::send, w.mem.data(), 8, w.mr, wr_id + 1), 0);
    c = w.p.a->wait(w.p.a->scq, 1);
    ASSERT_EQ(c.size(), 1u);
    EXPECT_EQ(c[0].status, WcStatus::wr_flush_err);
}

TEST(WindowBind, TypeOneWriteAndReadThroughTheWindow)
{
    WindowPair w(MwType::type1);
    fill_pattern(w.src, 3);
    const MwBind b = bind_of(w.mw, w.mr, w.at(1024), 4096, kRemoteRw);
    ASSERT_EQ(post_bind(*w.p.a, b, 1), 0);
    auto c = w.p.a->wait(w.p.a->scq, 1);
    ASSERT_EQ(c.size(), 1u);
    EXPECT_EQ(c[0].opcode, WcOpcode::bind_mw);
    EXPECT_EQ(c[0].status, WcStatus::success);
    EXPECT_EQ(w.mw->rkey(), b.rkey);
    // B writes 4 KiB through the window, then reads it back.
    ASSERT_EQ(w.p.b->post_send(WrOpcode::rdma_write, w.src.data(), 4096, w.smr, 2, w.at(1024), b.rkey), 0);
    ASSERT_EQ(w.p.b->post_send(WrOpcode::rdma_read, w.dst.data(), 4096, w.dmr, 3, w.at(1024), b.rkey), 0);
    c = w.p.b->wait(w.p.b->scq, 2);
    ASSERT_EQ(c.size(), 2u);
    EXPECT_EQ(c[0].status, WcStatus::success);
    EXPECT_EQ(c[1].status, WcStatus::success);
    EXPECT_EQ(c[1].opcode, WcOpcode::rdma_read);
    EXPECT_TRUE(std::equal(w.src.begin(), w.src.end(), w.mem.begin() + 1024));
    EXPECT_EQ(w.dst, w.src);
    EXPECT_EQ(w.mem[1023], 0);
    EXPECT_EQ(w.mem[1024 + 4096], 0);
    // The region cannot go while the window is bound to it.
    EXPECT_EQ(w.p.a->emu->dereg_mr(w.mr), EINVAL);
    // Rebinding (type 1) moves the window; the old rkey is dead: a Read through it
    // gets a Terminate RDMAP / remote protection / invalid STag.
    ASSERT_EQ(post_bind(*w.p.a, bind_of(w.mw, w.mr, w.at(0), 64, access_remote_read), 4), 0);
    c = w.p.a->wait(w.p.a->scq, 1);
    ASSERT_EQ(c.size(), 1u);
    EXPECT_EQ(c[0].status, WcStatus::success);
    ASSERT_EQ(w.p.b->post_send(WrOpcode::rdma_read, w.dst.data(), 64, w.dmr, 5, w.at(1024), b.rkey), 0);
    c = w.p.b->wait(w.p.b->scq, 1);
    ASSERT_EQ(c.size(), 1u);
    EXPECT_EQ(c[0].status, WcStatus::rem_access_err);
    EXPECT_EQ(w.p.a->qp->last_terminate_sent().code, code(0, 1, 0x00));
}

TEST(WindowBind, WriteOutsideTheWindowButInsideTheRegionIsRefused)
{
    WindowPair w(MwType::type2);
    const MwBind b = bind_of(w.mw, w.mr, w.at(1024), 1024, kRemoteRw);
    ASSERT_EQ(post_bind(*w.p.a, b, 1), 0);
    ASSERT_EQ(w.p.a->wait(w.p.a->scq, 1).size(), 1u);
    std::fill(w.src.begin(), w.src.end(), 0xAB);
    ASSERT_EQ(w.p.b->post_send(WrOpcode::rdma_write, w.src.data(), 64, w.smr, 2, w.at(2048 - 32), b.rkey), 0);
    ASSERT_TRUE(w.p.a->wait_state(QpState::err));
    EXPECT_EQ(w.p.a->qp->last_terminate_sent().code, code(1, 1, 0x01));  // DDP tagged base/bounds
    ASSERT_TRUE(w.p.b->wait_state(QpState::err));
    EXPECT_EQ(w.p.b->qp->last_terminate_received().code, code(1, 1, 0x01));
    EXPECT_EQ(w.mem[2048 - 32], 0);
    EXPECT_EQ(w.mem[2048], 0);
}

TEST(WindowBind, RegionWithoutBindRight)
{
    WindowPair w(MwType::type1, access_local_write);
    ASSERT_EQ(post_bind(*w.p.a, bind_of(w.mw, w.mr, w.at(0), 64, kRemoteRw), 1), 0);
    expect_bind_error(w, 1);
}

TEST(WindowBind, RightsBeyondTheRegion)
{
    WindowPair w(MwType::type2, access_mw_bind);  // no local write: no remote write through a window
    ASSERT_EQ(post_bind(*w.p.a, bind_of(w.mw, w.mr, w.at(0), 64, access_remote_write), 1), 0);
    expect_bind_error(w, 1);
}

TEST(WindowBind, RangeOutsideTheRegion)
{
    WindowPair w(MwType::type2);
    ASSERT_EQ(post_bind(*w.p.a, bind_of(w.mw, w.mr, w.at(8192 - 16), 32, kRemoteRw), 1), 0);
    expect_bind_error(w, 1);
}

TEST(WindowBind, RegionOfAnotherPd)
{
    WindowPair w(MwType::type1);
    ProtectionDomain* pd2;
    ASSERT_EQ(w.p.a->emu->alloc_pd(&pd2), 0);
    MemoryRegion* other;
    ASSERT_EQ(w.p.a->emu->reg_mr(pd2, w.mem.data(), w.mem.size(), w.at(0), kMrAccess, &other), 0);
    ASSERT_EQ(post_bind(*w.p.a, bind_of(w.mw, other, w.at(0), 64, kRemoteRw), 1), 0);
    expect_bind_error(w, 1);
}

TEST(WindowBind, TypeTwoWindowOfAnotherPdThanTheQp)
{
    WindowPair w(MwType::type2);
    ProtectionDomain* pd2;
    ASSERT_EQ(w.p.a->emu->alloc_pd(&pd2), 0);
    MemoryWindow* foreign;
    ASSERT_EQ(w.p.a->emu->alloc_mw(pd2, MwType::type2, &foreign), 0);
    MemoryRegion* other;
    ASSERT_EQ(w.p.a->emu->reg_mr(pd2, w.mem.data(), w.mem.size(), w.at(0), kMrAccess, &other), 0);
    ASSERT_EQ(post_bind(*w.p.a, bind_of(foreign, other, w.at(0), 64, kRemoteRw), 1), 0);
    auto c = w.p.a->wait(w.p.a->scq, 1);
    ASSERT_EQ(c.size(), 1u);
    EXPECT_EQ(c[0].status, WcStatus::mw_bind_err);
    EXPECT_FALSE(foreign->valid());
    EXPECT_EQ(w.p.a->emu->dealloc_mw(foreign), 0);
}

TEST(WindowBind, PostedOnlyInRts)
{
    Config cfg;
    Side s(cfg);  // INIT, never connected
    std::vector<uint8_t> mem(256);
    MemoryRegion* mr = s.reg(mem.data(), mem.size(), kMrAccess);
    MemoryWindow* mw;
    ASSERT_EQ(s.emu->alloc_mw(s.pd, MwType::type1, &mw), 0);
    const MwBind b = bind_of(mw, mr, reinterpret_cast<uint64_t>(mem.data()), 64, kRemoteRw);
    EXPECT_EQ(post_bind(s, b, 1), EINVAL);  // as rxe: a bind needs RTS
    MwBind none = b;
    none.mw = nullptr;
    QpAttr a;
    a.qp_state = QpState::err;
    ASSERT_EQ(s.qp->modify(a, qp_attr_state), 0);
    EXPECT_EQ(post_bind(s, none, 2), EINVAL);  // no window at all
    // In ERROR it is flushed, as any WR, and binds nothing.
    ASSERT_EQ(post_bind(s, b, 3), 0);
    auto c = s.wait(s.scq, 1);
    ASSERT_EQ(c.size(), 1u);
    EXPECT_EQ(c[0].wr_id, 3u);
    EXPECT_EQ(c[0].opcode, WcOpcode::bind_mw);
    EXPECT_EQ(c[0].status, WcStatus::wr_flush_err);
    EXPECT_FALSE(mw->valid());
    // A bind carries no data.
    SendWr wr;
    Sge sge{reinterpret_cast<uint64_t>(mem.data()), 8, mr->lkey()};
    wr.opcode = WrOpcode::bind_mw;
    wr.sg_list = &sge;
    wr.num_sge = 1;
    wr.bind = b;
    size_t bad;
    EXPECT_EQ(s.qp->post_send(&wr, 1, &bad), EINVAL);
    EXPECT_EQ(s.emu->dealloc_mw(mw), 0);
}

// Send with Invalidate of the type 2 window: B's receive says so, and the
// next access through it gets a Terminate; both sides see their errors.
TEST(WindowBind, RemotelyInvalidatedWindowRefusesTheNextAccess)
{
    WindowPair w(MwType::type2);
    const MwBind b = bind_of(w.mw, w.mr, w.at(0), 4096, kRemoteRw);
    ASSERT_EQ(post_bind(*w.p.a, b, 1), 0);
    ASSERT_EQ(w.p.a->wait(w.p.a->scq, 1).size(), 1u);
    ASSERT_EQ(w.p.b->post_send(WrOpcode::rdma_write, w.src.data(), 64, w.smr, 2, w.at(0), b.rkey), 0);
    // B invalidates A's window with its Send.
    std::vector<uint8_t> rbuf(64);
    MemoryRegion* rmr = w.p.a->reg(rbuf.data(), rbuf.size());
    ASSERT_EQ(w.p.a->post_recv(rbuf.data(), 64, rmr, 10), 0);
    ASSERT_EQ(w.p.a->post_recv(rbuf.data(), 64, rmr, 11), 0);
    ASSERT_EQ(w.p.b->post_send(WrOpcode::send_with_inv, w.src.data(), 8, w.smr, 3, 0, 0, send_signaled, b.rkey), 0);
    auto r = w.p.a->wait(w.p.a->rcq, 1);
    ASSERT_EQ(r.size(), 1u);
    EXPECT_EQ(r[0].status, WcStatus::success);
    EXPECT_TRUE(r[0].wc_flags & wc_with_inv);
    EXPECT_EQ(r[0].imm_data_or_inv_rkey, b.rkey);
    EXPECT_FALSE(w.mw->valid());
    // The window is unbound: the region may go now (not while a Read uses it: a fresh one).
    // B's Read through the dead window: Terminate RDMAP / remote protection /
    // invalid STag from A, the Read fails at B, A's posted receive is flushed.
    ASSERT_EQ(w.p.b->post_send(WrOpcode::rdma_read, w.dst.data(), 64, w.dmr, 4, w.at(0), b.rkey), 0);
    auto s = w.p.b->wait(w.p.b->scq, 3);
    ASSERT_EQ(s.size(), 3u);
    EXPECT_EQ(s[0].status, WcStatus::success);
    EXPECT_EQ(s[1].status, WcStatus::success);
    EXPECT_EQ(s[2].wr_id, 4u);
    EXPECT_EQ(s[2].status, WcStatus::rem_access_err);
    ASSERT_TRUE(w.p.a->wait_state(QpState::err));
    EXPECT_EQ(w.p.a->qp->last_terminate_sent().code, code(0, 1, 0x00));
    EXPECT_EQ(w.p.b->qp->last_terminate_received().code, code(0, 1, 0x00));
    EXPECT_TRUE(w.p.a->events.wait_async(AsyncEventType::qp_access_err));
    EXPECT_TRUE(w.p.b->events.wait_async(AsyncEventType::qp_fatal));
    r = w.p.a->wait(w.p.a->rcq, 1);
    ASSERT_EQ(r.size(), 1u);
    EXPECT_EQ(r[0].wr_id, 11u);
    EXPECT_EQ(r[0].status, WcStatus::wr_flush_err);
    EXPECT_EQ(w.p.a->emu->dereg_mr(w.mr), 0);
}

// A Write through an invalidated window: DDP tagged invalid STag, as for a region.
TEST(WindowBind, LocallyInvalidatedWindowRefusesWrites)
{
    WindowPair w(MwType::type2);
    const MwBind b = bind_of(w.mw, w.mr, w.at(0), 4096, kRemoteRw);
    ASSERT_EQ(post_bind(*w.p.a, b, 1), 0);
    ASSERT_EQ(w.p.a->post_send(WrOpcode::local_inv, nullptr, 0, nullptr, 2, 0, 0, send_signaled, b.rkey), 0);
    auto c = w.p.a->wait(w.p.a->scq, 2);
    ASSERT_EQ(c.size(), 2u);
    EXPECT_EQ(c[1].opcode, WcOpcode::local_inv);
    EXPECT_EQ(c[1].status, WcStatus::success);
    EXPECT_FALSE(w.mw->valid());
    std::fill(w.src.begin(), w.src.end(), 0xCD);
    ASSERT_EQ(w.p.b->post_send(WrOpcode::rdma_write, w.src.data(), 64, w.smr, 3, w.at(0), b.rkey), 0);
    ASSERT_TRUE(w.p.a->wait_state(QpState::err));
    EXPECT_EQ(w.p.a->qp->last_terminate_sent().code, code(1, 1, 0x00));
    ASSERT_TRUE(w.p.b->wait_state(QpState::err));
    EXPECT_EQ(w.mem[0], 0);
    // A type 2 window binds again once free, with a new key.
    MwBind again = b;
    again.rkey = next_rkey(b.rkey);
    EXPECT_EQ(w.p.a->emu->stags().bind_window(w.mw->entry(), again, w.p.a->pd, w.p.a->qp->stream_id()), 0);
}

TEST(WindowBind, TypeOneWindowIsNotInvalidatedByWorkRequests)
{
    WindowPair w(MwType::type1);
    const MwBind b = bind_of(w.mw, w.mr, w.at(0), 64, kRemoteRw);
    ASSERT_EQ(post_bind(*w.p.a, b, 1), 0);
    ASSERT_EQ(w.p.a->post_send(WrOpcode::local_inv, nullptr, 0, nullptr, 2, 0, 0, send_signaled, b.rkey), 0);
    auto c = w.p.a->wait(w.p.a->scq, 2);
    ASSERT_EQ(c.size(), 2u);
    EXPECT_EQ(c[1].status, WcStatus::loc_prot_err);
    EXPECT_TRUE(w.mw->valid());
    // Remotely: Terminate RDMAP / remote protection / cannot be invalidated.
    std::vector<uint8_t> rbuf(64);
    MemoryRegion* rmr = w.p.a->reg(rbuf.data(), rbuf.size());
    ASSERT_EQ(w.p.a->post_recv(rbuf.data(), 64, rmr, 10), 0);
    ASSERT_EQ(w.p.b->post_send(WrOpcode::send_with_inv, w.src.data(), 8, w.smr, 3, 0, 0, send_signaled, b.rkey), 0);
    ASSERT_TRUE(w.p.a->wait_state(QpState::err));
    EXPECT_EQ(w.p.a->qp->last_terminate_sent().code, code(0, 1, 0x09));
    auto r = w.p.a->wait(w.p.a->rcq, 1);
    ASSERT_EQ(r.size(), 1u);
    EXPECT_EQ(r[0].status, WcStatus::rem_inv_req_err);
    EXPECT_TRUE(w.mw->valid());
}

// A type 2 window serves only the QP that bound it: the same PD's other
// QP gets "STag not associated with the stream".
TEST(WindowBind, TypeTwoWindowRefusesAnotherQpOfItsPd)
{
    WindowPair w(MwType::type2);
    const MwBind b = bind_of(w.mw, w.mr, w.at(0), 4096, kRemoteRw);
    ASSERT_EQ(post_bind(*w.p.a, b, 1), 0);
    ASSERT_EQ(w.p.a->wait(w.p.a->scq, 1).size(), 1u);
    QpInitAttr ia;
    ia.send_cq = w.p.a->scq;
    ia.recv_cq = w.p.a->rcq;
    ia.cap = {8, 8, 1, 1, 0};
    QueuePair* qa2;
    ASSERT_EQ(w.p.a->emu->create_qp(w.p.a->pd, ia, &qa2), 0);
    ia.send_cq = w.p.b->scq;
    ia.recv_cq = w.p.b->rcq;
    QueuePair* qb2;
    ASSERT_EQ(w.p.b->emu->create_qp(w.p.b->pd, ia, &qb2), 0);
    QpAttr at;
    at.qp_state = QpState::init;
    at.qp_access_flags = access_local_write | access_remote_write | access_remote_read;
    ASSERT_EQ(qa2->modify(at, qp_attr_state | qp_attr_access_flags), 0);
    ASSERT_EQ(qb2->modify(at, qp_attr_state | qp_attr_access_flags), 0);
    ASSERT_EQ(attach_tcp_pair(qb2, qa2), 0);
    std::fill(w.src.begin(), w.src.end(), 0xEE);
    Sge sge{reinterpret_cast<uint64_t>(w.src.data()), 64, w.smr->lkey()};
    SendWr wr;
    wr.opcode = WrOpcode::rdma_write;
    wr.sg_list = &sge;
    wr.num_sge = 1;
    wr.remote_addr = w.at(0);
    wr.rkey = b.rkey;
    size_t bad;
    ASSERT_EQ(qb2->post_send(&wr, 1, &bad), 0);
    ASSERT_TRUE(wait_until([&] { return qa2->state() == QpState::err; }, 5s));
    EXPECT_EQ(qa2->last_terminate_sent().code, code(1, 1, 0x02));
    EXPECT_EQ(w.mem[0], 0);
    // The QP that bound it still writes through it (the Read behind the
    // Write completes once the Write was placed).
    ASSERT_EQ(w.p.b->post_send(WrOpcode::rdma_write, w.src.data(), 64, w.smr, 2, w.at(0), b.rkey), 0);
    ASSERT_EQ(w.p.b->post_send(WrOpcode::rdma_read, w.dst.data(), 64, w.dmr, 3, w.at(0), b.rkey), 0);
    std::vector<Completion> done;
    ASSERT_TRUE(wait_until(
        [&] {
            for (const Completion& c : w.p.b->wait(w.p.b->scq, 1, 1ms)) done.push_back(c);
            return done.size() >= 2;
        },
        5s));
    for (const Completion& c : done) EXPECT_EQ(c.status, WcStatus::success);
    EXPECT_EQ(w.mem[63], 0xEE);
    EXPECT_EQ(w.dst[63], 0xEE);
    EXPECT_EQ(w.p.a->qp->state(), QpState::rts);
}

// Dealloc while bound: the window dies at once, its region is free to go.
TEST(WindowBind, DeallocWhileBound)
{
    WindowPair w(MwType::type2);
    const MwBind b = bind_of(w.mw, w.mr, w.at(0), 4096, kRemoteRw);
    ASSERT_EQ(post_bind(*w.p.a, b, 1), 0);
    ASSERT_EQ(w.p.a->wait(w.p.a->scq, 1).size(), 1u);
    EXPECT_EQ(w.p.a->emu->dereg_mr(w.mr), EINVAL);
    ASSERT_EQ(w.p.a->emu->dealloc_mw(w.mw), 0);
    w.mw = nullptr;
    ASSERT_EQ(w.p.b->post_send(WrOpcode::rdma_read, w.dst.data(), 64, w.dmr, 2, w.at(0), b.rkey), 0);
    auto c = w.p.b->wait(w.p.b->scq, 1);
    ASSERT_EQ(c.size(), 1u);
    EXPECT_EQ(c[0].status, WcStatus::rem_access_err);
    EXPECT_EQ(w.p.a->qp->last_terminate_sent().code, code(0, 1, 0x00));
    EXPECT_EQ(w.p.a->emu->dereg_mr(w.mr), 0);
}

// Binds and accesses racing: a window rebound over and over while the peer
// writes through whichever key is current never places outside the window
// it checked, and never hangs.
TEST(WindowBind, RebindsWhileThePeerWrites)
{
    WindowPair w(MwType::type1);
    std::fill(w.src.begin(), w.src.end(), 0x5A);
    MwBind b = bind_of(w.mw, w.mr, w.at(0), 256, kRemoteRw);
    ASSERT_EQ(post_bind(*w.p.a, b, 1, 0), 0);
    ASSERT_TRUE(wait_until([&] { return w.mw->valid(); }, 5s));
    int posted = 0;
    for (int i = 0; i < 200 && w.p.a->qp->state() == QpState::rts; ++i) {
        ASSERT_EQ(w.p.b->post_send(WrOpcode::rdma_write, w.src.data(), 64, w.smr, 100 + i, w.at(64 * (i % 4)),
                                   b.rkey, 0),
                  0);
        b.rkey = next_rkey(b.rkey);  // the peer's next Write may find the old key dead: a Terminate ends the loop
        ASSERT_EQ(post_bind(*w.p.a, b, 1000 + i, 0), 0);
        ++posted;
    }
    EXPECT_GT(posted, 0);
    std::this_thread::sleep_for(50ms);
    // Whatever got through landed inside the window only.
    for (size_t i = 256; i < w.mem.size(); ++i) ASSERT_EQ(w.mem[i], 0) << i;
}

}  // namespace
}  // namespace iwemu::test
