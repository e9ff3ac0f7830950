// Liveness (Config::liveness_timeout_ms): a peer that stops taking data is
// a dead path after the bound, and the QP says so (ERROR, flushed work
// requests, QP_FATAL); meanwhile a polling thread does not hammer the full
// socket with sendmsg().
#include "tests/emulator/qp_loopback_fixture.h"

namespace iwemu::test {
namespace {

// A QP (side a, liveness_timeout_ms = timeout_ms) whose peer is a bare
// socket nobody reads: its window closes and stays closed.
struct SilentPeer {
    std::unique_ptr<Side> a;
    int peer_fd = -1;
    std::vector<uint8_t> buf = std::vector<uint8_t>(1 << 20);
    MemoryRegion* mr = nullptr;

    explicit SilentPeer(uint32_t timeout_ms)
    {
        Config c;
        c.peer_wakeup = false;
        c.liveness_timeout_ms = timeout_ms;
        a = std::make_unique<Side>(c);
        auto [fa, fb] = tcp_pair();
        peer_fd = fb;
        ConnectionParams p;
        p.fd = fa;
        p.role = ConnectionRole::responder;  // nothing expected from the peer first
        EXPECT_EQ(a->qp->attach_connection(p), 0);
        mr = a->reg(buf.data(), buf.size());
    }
    ~SilentPeer()
    {
        a.reset();
        ::close(peer_fd);
    }
    // Writes of 64 KiB until the send queue is full: far more than both
    // socket buffers hold.
    int post_all()
    {
        int n = 0;
        while (a->post_send(WrOpcode::rdma_write, buf.data(), 65536, mr, n, 0x1000, 0x100) == 0) ++n;
        return n;
    }
};

TEST(Liveness, PeerThatStopsReadingIsDeadWithinTheBound)
{
    SilentPeer s(1000);
    const int posted = s.post_all();
    ASSERT_GT(posted, 64);
    const auto start = std::chrono::steady_clock::now();
    ASSERT_TRUE(s.a->wait_state(QpState::err, 15s)) << "no liveness error";
    const auto took = std::chrono::steady_clock::now() - start;
    EXPECT_LT(took, 10s);
    auto wc = s.a->wait(s.a->scq, static_cast<size_t>(posted), 5s);
    ASSERT_EQ(wc.size(), static_cast<size_t>(posted)) << "every posted Write completes";
    size_t flushed = 0;
    for (const Completion& c : wc) flushed += c.status == WcStatus::wr_flush_err;
    EXPECT_GT(flushed, 0u);
    EXPECT_TRUE(s.a->events.wait_async(AsyncEventType::qp_fatal, 2s));
}

TEST(Liveness, PollingDoesNotRetrySendmsgAgainstAClosedWindow)
{
    SilentPeer s(0);  // never dead: only the window matters here
    ASSERT_GT(s.post_all(), 64);
    std::this_thread::sleep_for(200ms);  // the engine fills both buffers
    const uint64_t before = s.a->qp->counters().tx_syscalls.load();
    Completion wc[8];
    const auto end = std::chrono::steady_clock::now() + 300ms;
    uint64_t polls = 0;
    while (std::chrono::steady_clock::now() < end) {
        s.a->scq->poll(wc, 8);
        ++polls;
    }
    const uint64_t calls = s.a->qp->counters().tx_syscalls.load() - before;
    RecordProperty("sendmsg_in_300ms", std::to_string(calls));
    RecordProperty("polls", std::to_string(polls));
    EXPECT_LT(calls, 100u) << polls << " polls";
}

}  // namespace
}  // namespace iwemu::test
