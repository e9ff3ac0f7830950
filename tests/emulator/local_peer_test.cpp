// Both ends of a loopback connection in ONE emulator (local_peer.cpp): a
// Write's completion, as a poll returns it, means the target holds the
// data; two threads Writing to each other at once neither deadlock nor see
// stale data (the TSan stage runs these); a peer parked on a Send without
// a receive does not hold the Write behind it back.
#include <algorithm>
#include <cstring>

#include "tests/emulator/qp_loopback_fixture.h"

namespace iwemu::test {
namespace {

constexpr size_t kBuf = 1 << 20;

// Two QPs of one emulator (side.qp and a second one on its own CQs), connected.
struct OneProcessPair {
    Side side{[] {
        Config c;
        c.rnr_wait_ms = 3000;
        return c;
    }()};
    CompletionQueue* cq2 = nullptr;
    QueuePair* qp2 = nullptr;
    std::vector<uint8_t> a = std::vector<uint8_t>(2 * kBuf), b = std::vector<uint8_t>(2 * kBuf);
    MemoryRegion* ma = nullptr;
    MemoryRegion* mb = nullptr;

    OneProcessPair()
    {
        EXPECT_EQ(side.emu->create_cq(4096, &cq2), 0);
        QpInitAttr ia;
        ia.send_cq = cq2;
        ia.recv_cq = cq2;
        ia.cap = {256, 256, 4, 4, 0};
        EXPECT_EQ(side.emu->create_qp(side.pd, ia, &qp2), 0);
        QpAttr at;
        at.qp_state = QpState::init;
        at.qp_access_flags = access_local_write | access_remote_write;
        EXPECT_EQ(qp2->modify(at, qp_attr_state | qp_attr_access_flags), 0);
        EXPECT_EQ(attach_tcp_pair(side.qp, qp2), 0);
        ma = side.reg(a.data(), a.size());
        mb = side.reg(b.data(), b.size());
    }
};

int post_write(QueuePair* qp, uint8_t* src, MemoryRegion* smr, uint32_t len, uint8_t* dst, MemoryRegion* dmr)
{
    Sge sge{reinterpret_cast<uint64_t>(src), len, smr->lkey()};
    SendWr wr;
    wr.wr_id = len;
    wr.opcode = WrOpcode::rdma_write;
    wr.send_flags = send_signaled;
    wr.sg_list = &sge;
    wr.num_sge = 1;
    wr.remote_addr = reinterpret_cast<uint64_t>(dst);
    wr.rkey = dmr->rkey();
    size_t bad;
    return qp->post_send(&wr, 1, &bad);
}

// Busy polls `cq` for one completion (bounded).
bool one_completion(CompletionQueue* cq, Completion* c)
{
    const auto end = std::chrono::steady_clock::now() + 5s;
    while (std::chrono::steady_clock::now() < end)
        if (cq->poll(c, 1) == 1) return true;
    return false;
}

// Writes `len` octets of `v` from src to dst; true if its completion came
// and dst held them all at that moment.
bool write_placed(QueuePair* qp, CompletionQueue* cq, uint8_t* src, MemoryRegion* smr, uint8_t* dst,
                  MemoryRegion* dmr, uint32_t len, uint8_t v)
{
    std::memset(src, v, len);
    if (post_write(qp, src, smr, len, dst, dmr) != 0) return false;
    Completion c;
    if (!one_completion(cq, &c) || c.status != WcStatus::success) return false;
    for (uint32_t i = 0; i < len; ++i)
        if (dst[i] != v) return false;
    return true;
}

TEST(LocalPeer, WriteIsPlacedWhenItsCompletionIsPolled)
{
    OneProcessPair p;
    uint8_t v = 0;
    for (uint32_t len : {1u, 1000u, 65536u, static_cast<uint32_t>(kBuf)}) {
        int stale = 0;
        const int n = len >= kBuf ? 20 : 200;
        for (int i = 0; i < n; ++i) {
            v = static_cast<uint8_t>(v % 250 + 1);
            const bool ok = i % 2 ? write_placed(p.qp2, p.cq2, p.b.data(), p.mb, p.a.data() + kBuf, p.ma, len, v)
                                  : write_placed(p.side.qp, p.side.scq, p.a.data(), p.ma, p.b.data() + kBuf, p.mb, len, v);
            stale += !ok;
        }
        EXPECT_EQ(stale, 0) << len << " octets";
    }
}

TEST(LocalPeer, CrossedWritesFromTwoThreads)
{
    OneProcessPair p;
    std::atomic<int> stale{0};
    std::thread t([&] {
        for (int i = 0; i < 300; ++i)
            if (!write_placed(p.qp2, p.cq2, p.b.data(), p.mb, p.a.data() + kBuf, p.ma, 32768, static_cast<uint8_t>(1 + i % 100)))
                stale.fetch_add(1);
    });
    for (int i = 0; i < 300; ++i)
        if (!write_placed(p.side.qp, p.side.scq, p.a.data(), p.ma, p.b.data() + kBuf, p.mb, 32768,
                          static_cast<uint8_t>(101 + i % 100)))
            stale.fetch_add(1);
    t.join();
    EXPECT_EQ(stale.load(), 0);
}

TEST(LocalPeer, ParkedPeerDoesNotHoldTheWriteCompletion)
{
    OneProcessPair p;
    constexpr uint32_t len = 65536;
    std::memset(p.a.data(), 7, len);
    ASSERT_EQ(p.side.post_send(WrOpcode::send, p.a.data(), 16, p.ma, 1), 0);  // qp2 has no receive
    const auto start = std::chrono::steady_clock::now();
    ASSERT_EQ(post_write(p.side.qp, p.a.data(), p.ma, len, p.b.data() + kBuf, p.mb), 0);
    Completion c[2];
    ASSERT_TRUE(one_completion(p.side.scq, &c[0]));
    ASSERT_TRUE(one_completion(p.side.scq, &c[1]));
    EXPECT_LT(std::chrono::steady_clock::now() - start, 500ms);
    EXPECT_EQ(c[1].status, WcStatus::success);
    EXPECT_EQ(p.b[kBuf], 0);  // behind the parked Send
    Sge sge{reinterpret_cast<uint64_t>(p.b.data()), 64, p.mb->lkey()};
    RecvWr rwr{3, &sge, 1};
    size_t bad;
    ASSERT_EQ(p.qp2->post_recv(&rwr, 1, &bad), 0);
    Completion r;
    ASSERT_TRUE(one_completion(p.cq2, &r));
    EXPECT_EQ(r.status, WcStatus::success);
    // The next Write's completion is polled once the peer consumed the
    // stream up to it (under its receive lock: no racing read here), so
    // the one behind the Send is placed too.
    EXPECT_TRUE(write_placed(p.side.qp, p.side.scq, p.a.data() + len, p.ma, p.b.data() + kBuf + len, p.mb, len, 9));
    EXPECT_EQ(std::count(p.b.begin() + kBuf, p.b.begin() + kBuf + len, 7), len);
}

}  // namespace
}  // namespace iwemu::test
