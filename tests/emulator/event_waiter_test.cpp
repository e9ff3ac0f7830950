// A thread that blocks for a completion event receives itself
// (emulator/qp/rx_event_waiter.cpp): Emulator::wait_channel takes the read
// interest of the QPs feeding the channel, runs their receive path in the
// waiting thread, returns the event that thread produced (not written to
// the channel) or tells that the channel has one, and hands the sockets back
// to the engine.
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstring>
#include <future>
#include <thread>
#include <vector>

#include "tests/emulator/qp_loopback_fixture.h"

namespace iwemu::test {
namespace {

constexpr uint64_t kRecord = 0x1234'5678'9abc'def0;

// A completion channel as the shim makes it: a pipe whose read end names
// the channel; b's receive CQ posts one 8-byte record per event.
struct Channel {
    int fd[2] = {-1, -1};
    explicit Channel(CompletionQueue* cq)
    {
        EXPECT_EQ(pipe2(fd, O_CLOEXEC), 0);
        const int w = fd[1];
        cq->set_event_handler(
            [w] {
                const uint64_t record = kRecord;
                EXPECT_EQ(write(w, &record, sizeof record), static_cast<ssize_t>(sizeof record));
            },
            fd[0], kRecord);
    }
    ~Channel()
    {
        close(fd[0]);
        close(fd[1]);
    }
    bool has_event() const
    {
        pollfd p{fd[0], POLLIN, 0};
        return poll(&p, 1, 0) == 1;
    }
};

// Declared after the Channel and PairBuffers: stops both emulators (joining
// their engine threads, which may still write the channel or the buffers)
// before those go.
struct EnginesFirst {
    LoopbackPair& p;
    ~EnginesFirst()
    {
        p.b.reset();
        p.a.reset();
    }
};

using Wait = std::future<Emulator::ChannelWait>;

Wait start_wait(Side& s, int channel_fd, uint64_t* record)
{
    return std::async(std::launch::async,
                      [&s, channel_fd, record] { return s.emu->wait_channel(channel_fd, record); });
}

// A wait that should end within 5 s; one that does not is released through
// the channel so the test fails instead of hanging.
Emulator::ChannelWait finish(Wait& w, const Channel& ch)
{
    if (w.wait_for(5s) != std::future_status::ready) {
        ADD_FAILURE() << "wait_channel did not return";
        const uint64_t record = 0;
        EXPECT_EQ(write(ch.fd[1], &record, sizeof record), static_cast<ssize_t>(sizeof record));
    }
    return w.get();
}

// b posts a receive (`wr_id`), arms its CQ and starts a waiting thread;
// true once that thread has taken b's socket.
bool receive_armed_and_wait(LoopbackPair& p, PairBuffers& buf, Channel& ch, uint64_t wr_id, uint64_t* record, Wait* w)
{
    EXPECT_EQ(p.b->post_recv(buf.b.data(), 64, buf.mb, wr_id), 0);
    EXPECT_EQ(p.b->rcq->req_notify(false), 0);
    *w = start_wait(*p.b, ch.fd[0], record);
    return wait_until([&] { return p.b->qp->rx_poll_owned(); }, 5s);
}

TEST(EventWaiter, TheWaitingThreadReceivesAndTheEngineStaysOut)
{
    LoopbackPair p;
    PairBuffers buf(p);
    Channel ch(p.b->rcq);
    EnginesFirst stop{p};
    const uint64_t engine_before = p.b->qp->counters().rx_engine_passes.load();
    uint64_t record = 0;
    Wait w;
    ASSERT_TRUE(receive_armed_and_wait(p, buf, ch, 7, &record, &w));
    std::memcpy(buf.a.data(), "ping", 4);
    ASSERT_EQ(p.a->post_send(WrOpcode::send, buf.a.data(), 4, buf.ma, 1), 0);

    // The event comes back to the waiter, not through the channel.
    EXPECT_EQ(finish(w, ch), Emulator::ChannelWait::event);
    EXPECT_EQ(record, kRecord);
    EXPECT_FALSE(ch.has_event());
    EXPECT_EQ(p.b->rcq->size(), 1u);
    EXPECT_EQ(p.b->qp->counters().rx_engine_passes.load(), engine_before);
    // Handed back: the engine receives while nobody waits.
    EXPECT_FALSE(p.b->qp->rx_poll_owned());
    auto wc = p.b->wait(p.b->rcq, 1);
    ASSERT_EQ(wc.size(), 1u);
    EXPECT_EQ(wc[0].wr_id, 7u);
    EXPECT_EQ(wc[0].status, WcStatus::success);
    EXPECT_EQ(std::memcmp(buf.b.data(), "ping", 4), 0);
}

TEST(EventWaiter, AnEventPostedElsewhereEndsTheWaitAndTheSocketGoesBack)
{
    LoopbackPair p;
    PairBuffers buf(p);
    Channel ch(p.b->rcq);
    EnginesFirst stop{p};
    ASSERT_EQ(p.b->rcq->req_notify(false), 0);
    uint64_t record = 0;
    Wait w = start_wait(*p.b, ch.fd[0], &record);
    ASSERT_TRUE(wait_until([&] { return p.b->qp->rx_poll_owned(); }, 5s));
    const uint64_t elsewhere = 2;
    ASSERT_EQ(write(ch.fd[1], &elsewhere, sizeof elsewhere), static_cast<ssize_t>(sizeof elsewhere));
    EXPECT_EQ(finish(w, ch), Emulator::ChannelWait::ready);
    EXPECT_FALSE(p.b->qp->rx_poll_owned());

    // The engine receives again: an RDMA Write lands with nobody polling.
    std::memset(buf.a.data(), 0x5a, 64);
    ASSERT_EQ(p.a->post_send(WrOpcode::rdma_write, buf.a.data(), 64, buf.ma, 1,
                             reinterpret_cast<uint64_t>(buf.b.data()), buf.mb->rkey()),
              0);
    EXPECT_TRUE(wait_until([&] { return p.b->qp->counters().rx_fpdus.load() >= 1; }, 5s));
    EXPECT_GT(p.b->qp->counters().rx_engine_passes.load(), 0u);
}

TEST(EventWaiter, APeerThatGoesAwayEndsTheWaitWithTheFlush)
{
    LoopbackPair p;
    PairBuffers buf(p);
    Channel ch(p.b->rcq);
    EnginesFirst stop{p};
    uint64_t record = 0;
    Wait w;
    ASSERT_TRUE(receive_armed_and_wait(p, buf, ch, 9, &record, &w));
    p.a.reset();  // its emulator goes: the connection is aborted

    // The waiter reads the reset, or the engine's hang-up handling (hang-ups
    // stay with the engine) gets there first and writes the channel.
    const Emulator::ChannelWait r = finish(w, ch);
    if (r == Emulator::ChannelWait::event)
        EXPECT_EQ(record, kRecord);
    else
        EXPECT_TRUE(r == Emulator::ChannelWait::ready && ch.has_event());
    auto wc = p.b->wait(p.b->rcq, 1);
    ASSERT_EQ(wc.size(), 1u);
    EXPECT_EQ(wc[0].wr_id, 9u);
    EXPECT_EQ(wc[0].status, WcStatus::wr_flush_err);
}

TEST(EventWaiter, NotForAChannelNoQpFeedsNorWhenTurnedOff)
{
    {
        LoopbackPair p;
        Channel ch(p.b->rcq);
        int other[2];
        ASSERT_EQ(pipe(other), 0);
        uint64_t record;
        EXPECT_EQ(p.b->emu->wait_channel(other[0], &record), Emulator::ChannelWait::not_handled);
        close(other[0]);
        close(other[1]);
        EXPECT_FALSE(p.b->qp->rx_poll_owned());
    }
    PairOptions o;
    std::string err;
    ASSERT_TRUE(o.config.set("event_waiter_receives", "0", &err)) << err;
    LoopbackPair p(o);
    Channel ch(p.b->rcq);
    uint64_t record;
    EXPECT_EQ(p.b->emu->wait_channel(ch.fd[0], &record), Emulator::ChannelWait::not_handled);
    EXPECT_FALSE(p.b->qp->rx_poll_owned());
}

std::atomic<int> g_signals{0};
void count_signal(int) { g_signals.fetch_add(1); }

// poll() fails with EINTR whatever the handler asked for; read() of the
// channel would restart under SA_RESTART and fail without it.
TEST(EventWaiter, ASignalInterruptsTheWaitOnlyWhenItsHandlerAsksForEintr)
{
    LoopbackPair p;
    Channel ch(p.b->rcq);
    ASSERT_EQ(p.b->rcq->req_notify(false), 0);
    struct sigaction old{};
    for (const bool restart : {true, false}) {
        struct sigaction sa{};
        sa.sa_handler = count_signal;
        sa.sa_flags = restart ? SA_RESTART : 0;
        sigemptyset(&sa.sa_mask);
        ASSERT_EQ(sigaction(SIGUSR1, &sa, restart ? &old : nullptr), 0);
        const int signals_before = g_signals.load();

        std::promise<pthread_t> who;
        uint64_t record = 0;
        auto waiter = std::async(std::launch::async, [&] {
            who.set_value(pthread_self());
            return p.b->emu->wait_channel(ch.fd[0], &record);
        });
        const pthread_t t = who.get_future().get();
        ASSERT_TRUE(wait_until([&] { return p.b->qp->rx_poll_owned(); }, 5s));
        if (restart) {
            ASSERT_TRUE(wait_until(
                [&] {
                    pthread_kill(t, SIGUSR1);
                    return g_signals.load() > signals_before;
                },
                5s));
            std::this_thread::sleep_for(50ms);
            EXPECT_NE(waiter.wait_for(0s), std::future_status::ready);
            const uint64_t record = 3;
            ASSERT_EQ(write(ch.fd[1], &record, sizeof record), static_cast<ssize_t>(sizeof record));
            EXPECT_EQ(finish(waiter, ch), Emulator::ChannelWait::ready);
            uint64_t drained;
            ASSERT_EQ(read(ch.fd[0], &drained, sizeof drained), static_cast<ssize_t>(sizeof drained));
        } else {
            // A signal that comes before poll() sleeps is only handled; the next one interrupts.
            ASSERT_TRUE(wait_until(
                [&] {
                    pthread_kill(t, SIGUSR1);
                    return waiter.wait_for(10ms) == std::future_status::ready;
                },
                5s));
            EXPECT_EQ(waiter.get(), Emulator::ChannelWait::interrupted);
        }
        EXPECT_GT(g_signals.load(), signals_before);
        EXPECT_FALSE(p.b->qp->rx_poll_owned());
    }
    ASSERT_EQ(sigaction(SIGUSR1, &old, nullptr), 0);
}

// A timer tick's receive pass (on_timer: the RNR re-run reads the socket)
// may be the one that reads a Read Request while the socket is owned by a
// waiter, which then finds it empty and sleeps on.  The Response it owes
// must still leave: rping's client stalled so, waiting forever for the
// server's Read of its buffer (listener_churn under ASan, 1 run in 15).
TEST(EventWaiter, AReadRequestATimerTickReadIsAnswered)
{
    // Nobody else reads b's socket: the engine does not (as when the waiter
    // owns it), and b's application does not poll.
    PairOptions o;
    o.config.engine_receives = false;
    LoopbackPair p(o);
    std::vector<uint8_t> remote(64), local(64, 0);
    fill_pattern(remote, 7);
    auto* rmr = p.b->reg(remote.data(), remote.size());
    auto* lmr = p.a->reg(local.data(), local.size());
    // A first message: b's first inbound FPDU has come (its wait for the
    // Initiator, first_fpdus.cpp, is over and sends nothing more).
    ASSERT_EQ(p.b->post_recv(remote.data(), 1, rmr, 1), 0);
    ASSERT_EQ(p.a->post_send(WrOpcode::send, local.data(), 1, lmr, 1), 0);
    ASSERT_EQ(p.b->wait(p.b->rcq, 1).size(), 1u);
    ASSERT_EQ(p.a->wait(p.a->scq, 1).size(), 1u);
    fill_pattern(remote, 7);
    const int fd = p.b->qp->wait_socket();
    ASSERT_GE(fd, 0);
    ASSERT_EQ(p.a->post_send(WrOpcode::rdma_read, local.data(), 64, lmr, 9, reinterpret_cast<uint64_t>(remote.data()),
                             rmr->rkey()),
              0);
    pollfd pf{fd, POLLIN, 0};
    ASSERT_EQ(poll(&pf, 1, 5000), 1);
    p.b->qp->on_timer();  // reads the Read Request
    // The waiter, woken for the same octets, found nothing left and sleeps on.
    const auto s = p.a->wait(p.a->scq, 1, 3s);
    ASSERT_EQ(s.size(), 1u) << "the Read Response never left";
    EXPECT_EQ(s[0].status, WcStatus::success);
    EXPECT_EQ(0, std::memcmp(remote.data(), local.data(), 64));
}

}  // namespace
}  // namespace iwemu::test
