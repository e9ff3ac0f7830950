// QP endpoint (emulator/qp_endpoint.h) and its MPA private data
// (emulator/cm/oob_private_data.h): the codec, the initiator rule, and two
// Emulator instances (two "hosts") connecting QPs by (GID, QPN) over
// loopback through real sockets and the real ConnectionManager.
#include <arpa/inet.h>

#include <array>
#include <atomic>
#include <chrono>
#include <mutex>
#include <set>
#include <thread>

#include <gtest/gtest.h>

#include "emulator/cm/oob_private_data.h"
#include "emulator/emulator.h"
#include "emulator/qp_endpoint.h"

namespace iwemu {
namespace {

using namespace std::chrono_literals;

Gid gid_of(const char* text)
{
    Gid g{};
    EXPECT_EQ(inet_pton(AF_INET6, text, g.data()), 1);
    return g;
}

TEST(OobPrivateData, RoundTripsAndHasTheDocumentedLayout)
{
    cm::OobPrivateData pd;
    pd.kind = cm::OobKind::reject;
    pd.reason = cm::OobRejectReason::peer_mismatch;
    pd.target_qpn = 0xABCDEF;
    pd.source_qpn = 0x123456;
    std::array<uint8_t, 16> buf{};
    ASSERT_EQ(cm::encode_oob_private_data(pd, buf), 16u);
    const std::array<uint8_t, 16> expect = {0x69, 0x77, 0x4F, 0x42, 1, 2, 2, 0,
                                            0x00, 0xAB, 0xCD, 0xEF, 0x00, 0x12, 0x34, 0x56};
    EXPECT_EQ(buf, expect);
    auto back = cm::decode_oob_private_data(buf);
    ASSERT_TRUE(back);
    EXPECT_EQ(back->kind, cm::OobKind::reject);
    EXPECT_EQ(back->reason, cm::OobRejectReason::peer_mismatch);
    EXPECT_EQ(back->target_qpn, 0xABCDEFu);
    EXPECT_EQ(back->source_qpn, 0x123456u);
    std::array<uint8_t, 8> small{};
    EXPECT_EQ(cm::encode_oob_private_data(pd, small), 0u);
}

TEST(OobPrivateData, RefusesWhatIsNotOurs)
{
    cm::OobPrivateData pd;
    pd.target_qpn = 0x100;
    pd.source_qpn = 0x200;
    std::array<uint8_t, 20> buf{};
    cm::encode_oob_private_data(pd, buf);
    EXPECT_TRUE(cm::decode_oob_private_data(buf));  // longer: later versions may append
    EXPECT_FALSE(cm::decode_oob_private_data(std::span<const uint8_t>(buf.data(), 15)));
    auto bad = buf;
    bad[0] ^= 1;  // magic
    EXPECT_FALSE(cm::decode_oob_private_data(bad));
    bad = buf;
    bad[4] = 2;  // version
    EXPECT_FALSE(cm::decode_oob_private_data(bad));
    bad = buf;
    bad[5] = 9;  // kind
    EXPECT_FALSE(cm::decode_oob_private_data(bad));
    bad = buf;
    bad[8] = 1;  // target QPN above 24 bits
    EXPECT_FALSE(cm::decode_oob_private_data(bad));
}

TEST(QpEndpointRule, ExactlyOneSideInitiates)
{
    const Gid a = gid_of("::ffff:10.0.0.1"), b = gid_of("::ffff:10.0.0.2");
    for (auto [ga, qa, gb, qb] : {std::tuple{a, 0x500u, b, 0x400u}, std::tuple{a, 0x400u, a, 0x500u},
                                   std::tuple{b, 0x100u, a, 0x900u}}) {
        EXPECT_NE(QpEndpoint::initiates(ga, qa, gb, qb), QpEndpoint::initiates(gb, qb, ga, qa));
    }
    EXPECT_TRUE(QpEndpoint::initiates(a, 0x500, b, 0x400));  // GID first, then QPN
}

TEST(QpEndpointRule, UnusablePeersAreRefused)
{
    const Gid local = gid_of("::ffff:127.0.0.1");
    EXPECT_EQ(QpEndpoint::check_peer(0x1234, local, gid_of("::"), 0x4321), EINVAL);
    EXPECT_EQ(QpEndpoint::check_peer(0x1234, local, gid_of("::ffff:0.0.0.0"), 0x4321), EINVAL);
    EXPECT_EQ(QpEndpoint::check_peer(0x1234, local, gid_of("fe80::1"), 0x4321), EINVAL);
    EXPECT_EQ(QpEndpoint::check_peer(0x1234, local, local, 0x1234), EINVAL);     // itself
    EXPECT_EQ(QpEndpoint::check_peer(0x1234, local, local, 0x1000000), EINVAL);  // > 24 bits
    EXPECT_EQ(QpEndpoint::check_peer(0x1234, local, local, 0x12), EINVAL);       // port 0
    EXPECT_EQ(QpEndpoint::check_peer(0x1234, local, local, 0x4321), 0);
    EXPECT_EQ(QpEndpoint::check_peer(0x1234, local, gid_of("::1"), 0x4321), 0);
}

// One "host": an Emulator with a PD, a CQ and QPs in INIT.
Config short_timeouts()
{
    Config c;
    c.mpa_timeout_ms = 1000;  // a Responder waits oob timeout + MPA timeout
    c.oob_timeout_ms = 1000;
    return c;
}

struct Host {
    Emulator emu{short_timeouts()};
    ProtectionDomain* pd = nullptr;
    CompletionQueue* cq = nullptr;
    std::mutex lock;
    std::set<uint32_t> fatal;  // QPNs with QP_FATAL

    Host()
    {
        EXPECT_EQ(emu.alloc_pd(&pd), 0);
        EXPECT_EQ(emu.create_cq(64, &cq), 0);
        emu.set_async_event_handler([this](const AsyncEvent& ev) {
            if (ev.type == AsyncEventType::qp_fatal && ev.qp) {
                std::lock_guard g(lock);
                fatal.insert(ev.qp->qp_num());
            }
        });
        emu.qp_endpoint().set_timeout(1000ms, 50ms);
    }
    QueuePair* qp()
    {
        QpInitAttr ia{cq, cq, nullptr, {8, 8, 1, 1, 0}};
        QueuePair* q = nullptr;
        EXPECT_EQ(emu.create_qp(pd, ia, &q), 0);
        QpAttr a;
        a.qp_state = QpState::init;
        EXPECT_EQ(q->modify(a, qp_attr_state), 0);
        a.qp_state = QpState::rtr;
        EXPECT_EQ(q->modify(a, qp_attr_state), 0);
        return q;
    }
    bool has_fatal(uint32_t qpn)
    {
        std::lock_guard g(lock);
        return fatal.count(qpn) != 0;
    }
};

template <typename Pred>
bool eventually(Pred p, std::chrono::milliseconds limit = 5000ms)
{
    const auto end = std::chrono::steady_clock::now() + limit;
    while (std::chrono::steady_clock::now() < end) {
        if (p()) return true;
        std::this_thread::sleep_for(5ms);
    }
    return p();
}

TEST(QpEndpointLoopback, QpnsNameAListeningPortAndPeersConnect)
{
    Host h1, h2;
    const Gid lo = gid_of("::ffff:127.0.0.1");
    QueuePair* a = h1.qp();
    QueuePair* b = h2.qp();
    EXPECT_NE(a->qp_num() >> 8, 0u);
    EXPECT_NE(a->qp_num() >> 8, b->qp_num() >> 8);  // one endpoint port per process (Emulator)
    EXPECT_EQ(h1.emu.qp_endpoint().connect(a->qp_num(), lo, lo, b->qp_num()), 0);
    EXPECT_EQ(h2.emu.qp_endpoint().connect(b->qp_num(), lo, lo, a->qp_num()), 0);
    EXPECT_TRUE(eventually([&] { return a->connected() && b->connected(); }));
    EXPECT_EQ(a->state(), QpState::rts);
    EXPECT_EQ(b->state(), QpState::rts);
    // RTR again with the same peer is harmless, with another refused.
    EXPECT_EQ(h1.emu.qp_endpoint().connect(a->qp_num(), lo, lo, b->qp_num()), 0);
    EXPECT_EQ(h1.emu.qp_endpoint().connect(a->qp_num(), lo, lo, b->qp_num() ^ 1), EALREADY);
    EXPECT_EQ(h1.emu.destroy_qp(a), 0);
    EXPECT_EQ(h2.emu.destroy_qp(b), 0);
}

TEST(QpEndpointLoopback, WrongDestQpnEndsInErrorAndQpFatalOnBothSides)
{
    Host h1, h2;
    const Gid lo = gid_of("::ffff:127.0.0.1");
    QueuePair* a = h1.qp();
    QueuePair* b = h2.qp();
    const auto t0 = std::chrono::steady_clock::now();
    EXPECT_EQ(h1.emu.qp_endpoint().connect(a->qp_num(), lo, lo, b->qp_num() ^ 0x80), 0);
    EXPECT_EQ(h2.emu.qp_endpoint().connect(b->qp_num(), lo, lo, a->qp_num()), 0);
    EXPECT_TRUE(eventually([&] { return h1.has_fatal(a->qp_num()) && h2.has_fatal(b->qp_num()); }, 8000ms));
    EXPECT_LT(std::chrono::steady_clock::now() - t0, 8s);
    EXPECT_EQ(a->state(), QpState::err);
    EXPECT_EQ(b->state(), QpState::err);
    EXPECT_FALSE(a->connected() || b->connected());
    EXPECT_TRUE(h1.emu.qp_endpoint().link_failed(a->qp_num()));
    EXPECT_TRUE(h2.emu.qp_endpoint().link_failed(b->qp_num()));
}

TEST(QpEndpointLoopback, AfterResetAQpConnectsToAnotherPeer)
{
    Host h1, h2;
    const Gid lo = gid_of("::ffff:127.0.0.1");
    QueuePair* a = h1.qp();
    QueuePair* b = h2.qp();
    EXPECT_EQ(h1.emu.qp_endpoint().connect(a->qp_num(), lo, lo, b->qp_num() ^ 0x80), 0);
    EXPECT_EQ(h2.emu.qp_endpoint().connect(b->qp_num(), lo, lo, a->qp_num() ^ 0x80), 0);
    EXPECT_TRUE(eventually([&] { return h1.has_fatal(a->qp_num()) && h2.has_fatal(b->qp_num()); }, 8000ms));
    for (auto [h, q] : {std::pair{&h1, a}, std::pair{&h2, b}}) {
        QpAttr r;
        r.qp_state = QpState::reset;
        EXPECT_EQ(q->modify(r, qp_attr_state), 0);
        h->emu.qp_endpoint().reset(q->qp_num());  // what the provider does after RESET
        EXPECT_FALSE(h->emu.qp_endpoint().link_failed(q->qp_num()));
        r.qp_state = QpState::init;
        EXPECT_EQ(q->modify(r, qp_attr_state), 0);
        r.qp_state = QpState::rtr;
        EXPECT_EQ(q->modify(r, qp_attr_state), 0);
    }
    EXPECT_EQ(h1.emu.qp_endpoint().connect(a->qp_num(), lo, lo, b->qp_num()), 0);
    EXPECT_EQ(h2.emu.qp_endpoint().connect(b->qp_num(), lo, lo, a->qp_num()), 0);
    EXPECT_TRUE(eventually([&] { return a->connected() && b->connected(); }));
}

TEST(QpEndpointLoopback, RequestBeforeTheTargetsRtrIsHeldUntilIt)
{
    Host h1, h2;
    const Gid lo = gid_of("::ffff:127.0.0.1");
    QueuePair* a = h1.qp();
    QueuePair* b = h2.qp();
    // Make sure the one that dials goes first and its Request waits.
    QueuePair* first = QpEndpoint::initiates(lo, a->qp_num(), lo, b->qp_num()) ? a : b;
    Host& hf = first == a ? h1 : h2;
    Host& hs = first == a ? h2 : h1;
    QueuePair* second = first == a ? b : a;
    EXPECT_EQ(hf.emu.qp_endpoint().connect(first->qp_num(), lo, lo, second->qp_num()), 0);
    std::this_thread::sleep_for(300ms);
    EXPECT_FALSE(first->connected());
    EXPECT_EQ(hs.emu.qp_endpoint().connect(second->qp_num(), lo, lo, first->qp_num()), 0);
    EXPECT_TRUE(eventually([&] { return a->connected() && b->connected(); }));
}

}  // namespace
}  // namespace iwemu
