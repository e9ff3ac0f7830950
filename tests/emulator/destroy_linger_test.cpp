// A QP destroyed with a clean stream ends it gracefully (close_linger.cpp):
// the peer gets every octet TCP took before the destroy, then a FIN -- not
// an RST, which close() with unread input would send -- and the CM still
// hears the peer's FIN after the QP is gone (rdma_cm DISCONNECTED, cmtime's
// disconnect-then-destroy).  Two emulators over loopback TCP.
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <thread>
#include <vector>

#include "emulator/engine.h"
#include "tests/emulator/qp_loopback_fixture.h"

namespace iwemu::test {
namespace {

constexpr auto prompt = 5s;  // "at once" on a loaded 2-core machine

// Nobody reads a socket but an application's empty poll: input stays
// unread at a QP whose CQs are not polled.
PairOptions only_polls_receive()
{
    PairOptions o;
    o.config.engine_receives = false;
    return o;
}

// Polls side's receive CQ (its empty polls run the receive path) until n
// completions arrived or the deadline passed.
std::vector<Completion> receive(Side& side, size_t n)
{
    return side.wait(side.rcq, n, prompt);
}

TEST(DestroyLinger, UnreadInputAtDestroyStillDeliversEverythingAndEndsWithFin)
{
    // a's Sends that b has not read when a goes; at most tx_coalesce_after,
    // so none waits for a batch (with more, a's socket was read meanwhile).
    constexpr int later = 6;
    constexpr uint32_t len = 1024;
    LoopbackPair p{only_polls_receive()};
    std::vector<uint8_t> a_buf(len * (later + 1)), b_buf(len * (later + 1));
    fill_pattern(a_buf, 7);
    MemoryRegion* ma = p.a->reg(a_buf.data(), a_buf.size());
    MemoryRegion* mb = p.b->reg(b_buf.data(), b_buf.size());
    for (int i = 0; i <= later; ++i) ASSERT_EQ(p.b->post_recv(b_buf.data() + i * len, len, mb, i), 0);

    // a's first Send opens b's side of the stream (the Responder's gate).
    ASSERT_EQ(p.a->post_send(WrOpcode::send, a_buf.data(), len, ma, 0), 0);
    ASSERT_EQ(receive(*p.b, 1).size(), 1u);
    // a's last Sends, complete at a (TCP took them), unread at b.
    for (int i = 1; i <= later; ++i)
        ASSERT_EQ(p.a->post_send(WrOpcode::send, a_buf.data() + i * len, len, ma, i), 0);
    ASSERT_TRUE(wait_until([&] { return p.a->scq->size() == later + 1; }, prompt));
    // b's Send to a: a neither polls nor posts any more, so it stays unread
    // in a's socket.
    ASSERT_EQ(p.b->post_send(WrOpcode::send, b_buf.data(), 64, mb, 100), 0);
    ASSERT_TRUE(wait_until([&] { return p.b->scq->size() == 1; }, prompt));
    std::this_thread::sleep_for(20ms);  // b's input settles in its socket
    ASSERT_EQ(p.a->emu->destroy_qp(p.a->qp), 0);

    const auto wc = receive(*p.b, later);
    ASSERT_EQ(wc.size(), static_cast<size_t>(later));
    for (int i = 0; i < later; ++i) {
        EXPECT_EQ(wc[i].status, WcStatus::success) << "receive " << i + 1;
        EXPECT_EQ(wc[i].wr_id, static_cast<uint64_t>(i + 1));
    }
    EXPECT_EQ(b_buf, a_buf);
    // The stream ended with a's FIN: b saw the peer close, not a reset.
    ASSERT_TRUE(wait_until(
        [&] {
            Completion c[4];
            p.b->rcq->poll(c, 4);  // b's receive path sees the end of the stream
            return p.b->events.has_conn(QpConnectionEvent::peer_closed) ||
                   p.b->events.has_conn(QpConnectionEvent::connection_error);
        },
        prompt));
    EXPECT_TRUE(p.b->events.has_conn(QpConnectionEvent::peer_closed));
    EXPECT_FALSE(p.b->events.has_conn(QpConnectionEvent::connection_error));
}

TEST(DestroyLinger, PeerFinAfterDestroyIsStillReported)
{
    LoopbackPair p;
    PairBuffers buf(p);
    // One FPDU from a: the stream is in use, b's side open.
    ASSERT_EQ(p.a->post_send(WrOpcode::rdma_write, buf.a.data(), 16, buf.ma, 0,
                             reinterpret_cast<uint64_t>(buf.b.data()), buf.mb->rkey()),
              0);
    ASSERT_EQ(p.a->wait(p.a->scq, 1, prompt).size(), 1u);
    // cmtime's client: disconnect, destroy the QP at once, wait for DISCONNECTED.
    p.a->qp->disconnect();
    ASSERT_EQ(p.a->emu->destroy_qp(p.a->qp), 0);
    ASSERT_TRUE(p.b->events.wait_conn(QpConnectionEvent::peer_closed, prompt));
    // b answered with its FIN: a's connection handler hears it.
    EXPECT_TRUE(p.a->events.wait_conn(QpConnectionEvent::peer_closed, prompt));
    EXPECT_FALSE(p.a->events.has_conn(QpConnectionEvent::connection_error));
    EXPECT_TRUE(wait_until([&] { return p.a->emu->engine().lingering() == 0; }, prompt));
}

// A QP destroyed after the peer's FIN has nothing to wait for: no socket
// is left behind in the engine.
TEST(DestroyLinger, NothingLingersOnceBothSidesClosed)
{
    LoopbackPair p;
    p.b->qp->disconnect();
    ASSERT_TRUE(p.a->events.wait_conn(QpConnectionEvent::peer_closed, prompt));
    ASSERT_TRUE(p.b->events.wait_conn(QpConnectionEvent::peer_closed, prompt));
    ASSERT_EQ(p.a->emu->destroy_qp(p.a->qp), 0);
    ASSERT_EQ(p.b->emu->destroy_qp(p.b->qp), 0);
    EXPECT_EQ(p.a->emu->engine().lingering(), 0u);
    EXPECT_EQ(p.b->emu->engine().lingering(), 0u);
}

// A peer that streams at a lingering socket as fast as TCP lets it: its
// sender thread, the octets TCP took and the error that stopped it.
struct StreamingPeer {
    static constexpr size_t cap = size_t{1} << 30;  // more than any drain may take
    int fd;
    std::atomic<size_t> sent{0};
    std::atomic<int> error{0};
    std::atomic<bool> stopped{false};
    std::thread thread;

    explicit StreamingPeer(int peer_fd) : fd(peer_fd)
    {
        thread = std::thread([this] {
            std::vector<uint8_t> chunk(65536, 0x5A);
            while (sent.load() < cap) {
                const ssize_t n = ::send(fd, chunk.data(), chunk.size(), MSG_NOSIGNAL);
                if (n < 0) {
                    if (errno == EINTR) continue;
                    error = errno;
                    break;
                }
                sent += static_cast<size_t>(n);
            }
            stopped = true;
        });
    }
    ~StreamingPeer()
    {
        ::shutdown(fd, SHUT_RDWR);  // a sender still blocked in send() returns
        thread.join();
        ::close(fd);
    }
};

// A teardown that finds the peer still streaming drains a bounded amount,
// then resets the stream: it returns promptly, and the peer's sends fail
// instead of vanishing into a drain as if received (a peer's Sends all
// "completed" that way, CmQpTeardown.PeerKilledMidTransferFlushesWithoutHanging).
TEST(DestroyLinger, ATeardownResetsAPeerStillStreaming)
{
    auto [ours, theirs] = tcp_pair();
    auto side = std::make_unique<Side>(Config{});
    side->emu->engine().linger_close(ours, nullptr);
    StreamingPeer peer(theirs);
    ASSERT_TRUE(wait_until([&] { return peer.sent.load() > (size_t{32} << 20); }, prompt))
        << "the engine drains the lingering socket";
    const auto start = std::chrono::steady_clock::now();
    const size_t sent_before = peer.sent.load();
    side.reset();
    EXPECT_LT(std::chrono::steady_clock::now() - start, prompt);
    ASSERT_TRUE(wait_until([&] { return peer.stopped.load(); }, prompt));
    EXPECT_TRUE(peer.error == ECONNRESET || peer.error == EPIPE) << peer.error.load();
    // The last drain (16 MiB) and what the two socket buffers held at most.
    EXPECT_LT(peer.sent.load() - sent_before, size_t{64} << 20);
}

// The engine drains a lingering socket in bounded passes: a peer streaming
// at it does not hold up the QPs the engine also serves.
TEST(DestroyLinger, AStreamingPeerOfALingeringSocketDoesNotStallOtherQps)
{
    LoopbackPair p;
    PairBuffers buf(p);
    auto [ours, theirs] = tcp_pair();
    // Our FIN held back (as during the close grace): the peer may stream on.
    p.a->emu->engine().linger_close(ours, nullptr, Engine::Clock::now() + 60s);
    StreamingPeer peer(theirs);
    ASSERT_TRUE(wait_until([&] { return peer.sent.load() > (size_t{8} << 20); }, prompt));
    for (uint64_t i = 0; i < 20; ++i) {
        ASSERT_EQ(p.b->post_recv(buf.b.data(), 64, buf.mb, i), 0);
        ASSERT_EQ(p.a->post_send(WrOpcode::send, buf.a.data(), 64, buf.ma, i), 0);
        ASSERT_EQ(p.a->wait(p.a->scq, 1, prompt).size(), 1u) << "Send " << i;
        ASSERT_EQ(p.b->wait(p.b->rcq, 1, prompt).size(), 1u) << "receive " << i;
    }
    EXPECT_FALSE(peer.stopped.load()) << "the lingering socket is still drained: " << peer.error.load();
}

// A peer that streams on long after our FIN went is reset, and the CM hears
// of it as an error, instead of being drained until close_linger_max.
TEST(DestroyLinger, APeerStreamingLongAfterOurFinIsReset)
{
    auto side = std::make_unique<Side>(Config{});
    auto [ours, theirs] = tcp_pair();
    ASSERT_EQ(::shutdown(ours, SHUT_WR), 0);  // our FIN, as a destroyed QP's
    std::atomic<int> done_error{-1};
    side->emu->engine().linger_close(ours, [&](int error) { done_error = error; });
    StreamingPeer peer(theirs);
    ASSERT_TRUE(wait_until([&] { return peer.stopped.load(); }, prompt)) << peer.sent.load() << " octets sent";
    EXPECT_TRUE(peer.error == ECONNRESET || peer.error == EPIPE) << peer.error.load();
    // 64 MiB after our FIN, and what the socket buffers held beyond it.
    EXPECT_GE(peer.sent.load(), size_t{64} << 20);
    EXPECT_LT(peer.sent.load(), size_t{128} << 20);
    ASSERT_TRUE(wait_until([&] { return done_error.load() != -1; }, prompt));
    EXPECT_EQ(done_error.load(), ECONNRESET);
    EXPECT_EQ(side->emu->engine().lingering(), 0u);
}

}  // namespace
}  // namespace iwemu::test
