// Connection setup end to end: two emulator endpoints whose QPs are joined by
// the CM (MPA startup over loopback TCP, hand-off, RTR by the QP), then data,
// graceful disconnect and a peer killed mid-transfer.  Bounded waits.
#include <gtest/gtest.h>

#include "emulator/cm/connection_manager.h"
#include "tests/emulator/cm_event_log.h"
#include "tests/emulator/qp_loopback_fixture.h"

namespace iwemu::cm {
namespace {

using namespace std::chrono_literals;
using test::CmEventLog;
using test::Side;

// What the rdma_cm emulation does for a QP: attach, report the end of the
// stream back to the CM, forward disconnect().
Endpoint qp_endpoint(QueuePair* qp, ConnectionManager& cm)
{
    Endpoint e;
    e.attach = [qp, &cm](ConnectionId id, const ConnectionParams& params) {
        qp->set_connection_event_handler([&cm, id](QpConnectionEvent ev) {
            if (ev == QpConnectionEvent::established)
                return;
            cm.notify_disconnected(id, ev == QpConnectionEvent::peer_closed ? 0 : ECONNRESET);
        });
        return qp->attach_connection(params);
    };
    e.disconnect = [qp](ConnectionId, DisconnectMode mode) {
        if (mode == DisconnectMode::graceful)
            qp->disconnect();
        else
            qp->abort();
    };
    return e;
}

struct CmQpPair {
    // Declared first, destroyed last: the CMs' handlers point here.
    CmEventLog server_events, client_events;
    std::unique_ptr<Side> server, client;
    ConnectionManager server_cm, client_cm;
    ListenerId listener = 0;
    ConnectionId server_id = 0, client_id = 0;

    CmQpPair(CmSettings server_settings, CmSettings client_settings)
        : server(std::make_unique<Side>(Config{})), client(std::make_unique<Side>(Config{})),
          server_cm(server_settings), client_cm(client_settings)
    {
    }
    ~CmQpPair()
    {
        // QPs first (their handlers call into the CMs), then the CMs.
        client.reset();
        server.reset();
    }

    bool connect()
    {
        sockaddr_storage any{};
        auto* in = reinterpret_cast<sockaddr_in*>(&any);
        in->sin_family = AF_INET;
        in->sin_addr.s_addr = htonl(INADDR_LOOPBACK);
        sockaddr_storage bound{};
        if (server_cm.listen(reinterpret_cast<sockaddr*>(&any), sizeof(sockaddr_in), 8, server_events.handler(),
                             &listener, &bound) != 0)
            return false;
        ConnectArgs ca;
        ca.remote = bound;
        ca.ird = 16;
        ca.ord = 16;
        ca.endpoint = qp_endpoint(client->qp, client_cm);
        ca.handler = client_events.handler();
        if (client_cm.connect(ca, &client_id) != 0)
            return false;
        auto req = server_events.wait(CmEventType::connect_request);
        if (!req)
            return false;
        server_id = req->connection;
        AcceptArgs aa;
        aa.ird = 16;
        aa.ord = 16;
        aa.endpoint = qp_endpoint(server->qp, server_cm);
        if (server_cm.accept(server_id, aa) != 0)
            return false;
        auto c = client_events.wait(CmEventType::established);
        auto s = server_events.wait(CmEventType::established);
        return c && s;
    }

    // One Send client -> server and one RDMA Write, verified.
    void exchange()
    {
        std::vector<uint8_t> src(3000), dst(3000, 0), wdst(3000, 0);
        test::fill_pattern(src, 7);
        auto* smr = client->reg(src.data(), src.size());
        auto* dmr = server->reg(dst.data(), dst.size());
        auto* wmr = server->reg(wdst.data(), wdst.size());
        ASSERT_EQ(server->post_recv(dst.data(), 3000, dmr, 1), 0);
        ASSERT_EQ(client->post_send(WrOpcode::send, src.data(), 3000, smr, 2), 0);
        auto r = server->wait(server->rcq, 1);
        ASSERT_EQ(r.size(), 1u);
        EXPECT_EQ(r[0].status, WcStatus::success);
        EXPECT_EQ(0, std::memcmp(src.data(), dst.data(), src.size()));
        ASSERT_EQ(client->post_send(WrOpcode::rdma_write, src.data(), 3000, smr, 3,
                                    reinterpret_cast<uint64_t>(wdst.data()), wmr->rkey()),
                  0);
        // A Send behind the Write: its receive completion proves the Write
        // was placed (RDMAP ordering) and synchronises with the RX thread.
        ASSERT_EQ(server->post_recv(dst.data(), 3000, dmr, 4), 0);
        ASSERT_EQ(client->post_send(WrOpcode::send, src.data(), 16, smr, 5), 0);
        auto s = client->wait(client->scq, 3);
        ASSERT_EQ(s.size(), 3u);
        for (const auto& c : s)
            EXPECT_EQ(c.status, WcStatus::success);
        auto r2 = server->wait(server->rcq, 1);
        ASSERT_EQ(r2.size(), 1u);
        EXPECT_EQ(r2[0].wr_id, 4u);
        EXPECT_EQ(0, std::memcmp(src.data(), wdst.data(), src.size()));
        EXPECT_EQ(client->emu->dereg_mr(smr), 0);
        EXPECT_EQ(server->emu->dereg_mr(dmr), 0);
        EXPECT_EQ(server->emu->dereg_mr(wmr), 0);
    }
};

struct Variant {
    RtrType rtr;
    bool crc;
    bool markers_client, markers_server;
};

class CmQp : public ::testing::TestWithParam<Variant> {};

TEST_P(CmQp, ConnectThroughTheCmAndMoveData)
{
    const Variant v = GetParam();
    CmSettings c, s;
    c.rtr = {v.rtr == RtrType::zero_length_send, v.rtr == RtrType::zero_length_write,
             v.rtr == RtrType::zero_length_read};
    if (v.rtr == RtrType::none)
        c.peer_to_peer = PeerToPeerMode::off;
    s.rtr = {true, true, true};
    c.crc = s.crc = v.crc;
    c.markers = v.markers_client;
    s.markers = v.markers_server;
    CmQpPair p(s, c);
    ASSERT_TRUE(p.connect());
    p.exchange();
}

INSTANTIATE_TEST_SUITE_P(Variants, CmQp,
                         ::testing::Values(Variant{RtrType::zero_length_write, true, false, false},
                                           Variant{RtrType::zero_length_read, true, false, false},
                                           Variant{RtrType::zero_length_send, true, false, false},
                                           Variant{RtrType::none, true, false, false},
                                           Variant{RtrType::zero_length_write, false, false, false},
                                           Variant{RtrType::zero_length_write, true, true, true},
                                           Variant{RtrType::zero_length_read, false, true, false}));

TEST(CmQpTeardown, GracefulDisconnectReachesBothSidesAndFlushes)
{
    CmQpPair p({}, {});
    ASSERT_TRUE(p.connect());
    p.exchange();
    std::vector<uint8_t> spare(256);
    auto* mr = p.server->reg(spare.data(), spare.size());
    ASSERT_EQ(p.server->post_recv(spare.data(), 256, mr, 42), 0);

    ASSERT_EQ(p.client_cm.disconnect(p.client_id, DisconnectMode::graceful), 0);
    auto sd = p.server_events.wait(CmEventType::disconnected);
    ASSERT_TRUE(sd);
    EXPECT_EQ(sd->error, 0);
    ASSERT_EQ(p.server_cm.disconnect(p.server_id, DisconnectMode::graceful), 0);
    auto cd = p.client_events.wait(CmEventType::disconnected);
    ASSERT_TRUE(cd);

    // The unused receive is flushed once both halves are closed.
    auto r = p.server->wait(p.server->rcq, 1, 5s);
    ASSERT_EQ(r.size(), 1u);
    EXPECT_EQ(r[0].wr_id, 42u);
    EXPECT_EQ(r[0].status, WcStatus::wr_flush_err);
}

TEST(CmQpTeardown, AbortiveDisconnectFlushesAtOnce)
{
    CmQpPair p({}, {});
    ASSERT_TRUE(p.connect());
    std::vector<uint8_t> spare(256);
    auto* mr = p.client->reg(spare.data(), spare.size());
    ASSERT_EQ(p.client->post_recv(spare.data(), 256, mr, 5), 0);
    ASSERT_EQ(p.client_cm.disconnect(p.client_id, DisconnectMode::abortive), 0);
    auto r = p.client->wait(p.client->rcq, 1, 5s);
    ASSERT_EQ(r.size(), 1u);
    EXPECT_EQ(r[0].status, WcStatus::wr_flush_err);
    EXPECT_TRUE(p.client_events.wait(CmEventType::disconnected));
    auto sd = p.server_events.wait(CmEventType::disconnected);
    ASSERT_TRUE(sd);
    EXPECT_NE(sd->error, 0);  // RST, not an orderly close
}

TEST(CmQpTeardown, PeerKilledMidTransferFlushesWithoutHanging)
{
    CmQpPair p({}, {});
    ASSERT_TRUE(p.connect());
    // 1 GiB of Sends against receives for 32 MiB of them: far more than the
    // socket buffers hold.  The receiver then waits for a receive (RNR wait)
    // and TCP holds the sender back, so Sends are still queued when it dies
    // however fast the receiver places (all receives posted, a fast host
    // moved the whole GiB while the server was being torn down).
    constexpr uint32_t msg = 4 * 1024 * 1024;
    constexpr int count = 256;
    constexpr int receives = 8;
    std::vector<uint8_t> src(msg), dst(msg);
    auto* smr = p.client->reg(src.data(), src.size());
    auto* dmr = p.server->reg(dst.data(), dst.size());
    for (int i = 0; i < receives; ++i)
        ASSERT_EQ(p.server->post_recv(dst.data(), msg, dmr, 1000 + i), 0);
    for (int i = 0; i < count; ++i)
        ASSERT_EQ(p.client->post_send(WrOpcode::send, src.data(), msg, smr, static_cast<uint64_t>(i)), 0);
    // Let some of it flow, then the server process "dies": its whole
    // emulator goes away (sockets closed with data unread -> RST).
    auto first = p.server->wait(p.server->rcq, 1, 5s);
    ASSERT_GE(first.size(), 1u);
    p.server.reset();

    // Every posted Send completes (done or flushed), the QP ends in ERROR,
    // and the CM reports the connection gone.
    auto done = p.client->wait(p.client->scq, count, 10s);
    ASSERT_EQ(done.size(), static_cast<size_t>(count));
    size_t flushed = 0;
    for (const auto& c : done)
        flushed += c.status != WcStatus::success;
    EXPECT_GT(flushed, 0u);
    EXPECT_TRUE(p.client->wait_state(QpState::err));
    // FIN or RST depending on how the dead side's sockets went: either way
    // the ULP hears of it.
    EXPECT_TRUE(p.client_events.wait(CmEventType::disconnected));
}

}  // namespace
}  // namespace iwemu::cm
