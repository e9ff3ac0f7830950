// Two emulator endpoints (separate Emulator instances, as two hosts would
// have) whose QPs are joined by a real loopback TCP connection, optionally
// through a re-segmenting proxy.  MPA startup is the CM's job: here both QPs
// get matching ConnectionParams directly, which is exactly the hand-off
// contract (emulator/base/connection_params.h).
#pragma once

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <memory>
#include <mutex>
#include <random>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "emulator/emulator.h"

namespace iwemu::test {

using namespace std::chrono_literals;

inline int listen_loopback(uint16_t* port)
{
    int ls = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    int one = 1;
    setsockopt(ls, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    if (::bind(ls, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0 || ::listen(ls, 16) != 0) return -1;
    socklen_t len = sizeof a;
    getsockname(ls, reinterpret_cast<sockaddr*>(&a), &len);
    *port = ntohs(a.sin_port);
    return ls;
}

inline int connect_loopback(uint16_t port)
{
    int s = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    a.sin_port = htons(port);
    if (::connect(s, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0) {
        ::close(s);
        return -1;
    }
    return s;
}

// A connected TCP pair over loopback (a, b).
inline std::pair<int, int> tcp_pair()
{
    uint16_t port = 0;
    int ls = listen_loopback(&port);
    int a = connect_loopback(port);
    int b = ::accept4(ls, nullptr, nullptr, SOCK_CLOEXEC);
    ::close(ls);
    return {a, b};
}

// Re-segmenting proxy: forwards both directions in random 1..max_chunk byte
// writes with small random delays, so FPDUs arrive split and merged anyhow.
class ResegmentingProxy {
public:
    ResegmentingProxy(int left, int right, size_t max_chunk, unsigned seed)
        : left_(left), right_(right), max_chunk_(max_chunk), rng_(seed)
    {
        thread_ = std::thread([this] { run(); });
    }
    ~ResegmentingProxy()
    {
        stop_ = true;
        thread_.join();
        if (left_ >= 0) ::close(left_);
        if (right_ >= 0) ::close(right_);
    }
    // Simulate a crash of the side behind `right`: RST both ways.
    void kill()
    {
        kill_ = true;
    }

private:
    void run()
    {
        std::vector<uint8_t> buf(64 * 1024);
        bool left_open = true, right_open = true;
        while (!stop_ && (left_open || right_open)) {
            if (kill_) {
                linger lg{1, 0};
                setsockopt(left_, SOL_SOCKET, SO_LINGER, &lg, sizeof lg);
                setsockopt(right_, SOL_SOCKET, SO_LINGER, &lg, sizeof lg);
                ::close(left_);
                ::close(right_);
                left_ = right_ = -1;
                return;
            }
            pollfd p[2] = {{left_open ? left_ : -1, POLLIN, 0}, {right_open ? right_ : -1, POLLIN, 0}};
            if (::poll(p, 2, 20) <= 0) continue;
            for (int i = 0; i < 2; ++i) {
                if (!(p[i].revents & (POLLIN | POLLHUP | POLLERR))) continue;
                const int from = i == 0 ? left_ : right_;
                const int to = i == 0 ? right_ : left_;
                const size_t want = std::uniform_int_distribution<size_t>(1, max_chunk_)(rng_);
                ssize_t n = ::read(from, buf.data(), std::min(want, buf.size()));
                if (n <= 0) {
                    ::shutdown(to, SHUT_WR);
                    (i == 0 ? left_open : right_open) = false;
                    continue;
                }
                size_t off = 0;
                while (off < static_cast<size_t>(n)) {
                    ssize_t w = ::write(to, buf.data() + off, static_cast<size_t>(n) - off);
                    if (w <= 0) break;
                    off += static_cast<size_t>(w);
                }
                if (std::uniform_int_distribution<int>(0, 50)(rng_) == 0) std::this_thread::sleep_for(100us);
            }
        }
    }

    int left_, right_;
    size_t max_chunk_;
    std::mt19937 rng_;
    std::atomic<bool> stop_{false};
    std::atomic<bool> kill_{false};
    std::thread thread_;
};

struct EventLog {
    std::mutex lock;
    std::vector<AsyncEvent> async;
    std::vector<QpConnectionEvent> conn;

    bool has_async(AsyncEventType t)
    {
        std::lock_guard<std::mutex> g(lock);
        for (auto& e : async)
            if (e.type == t) return true;
        return false;
    }
    bool wait_async(AsyncEventType t, std::chrono::milliseconds timeout = std::chrono::seconds(2))
    {
        const auto end = std::chrono::steady_clock::now() + timeout;
        while (!has_async(t) && std::chrono::steady_clock::now() < end)
            std::this_thread::sleep_for(std::chrono::milliseconds(1));
        return has_async(t);
    }
    bool wait_conn(QpConnectionEvent t, std::chrono::milliseconds timeout = std::chrono::seconds(2))
    {
        const auto end = std::chrono::steady_clock::now() + timeout;
        while (!has_conn(t) && std::chrono::steady_clock::now() < end)
            std::this_thread::sleep_for(std::chrono::milliseconds(1));
        return has_conn(t);
    }
    bool has_conn(QpConnectionEvent t)
    {
        std::lock_guard<std::mutex> g(lock);
        for (auto& e : conn)
            if (e == t) return true;
        return false;
    }
};

struct Side {
    std::unique_ptr<Emulator> emu;
    ProtectionDomain* pd = nullptr;
    CompletionQueue* scq = nullptr;
    CompletionQueue* rcq = nullptr;
    QueuePair* qp = nullptr;
    EventLog events;

    static Config with_env(Config cfg)
    {
        if (const char* l = std::getenv("IWEMU_LOG")) cfg.set("log", l, nullptr);
        return cfg;
    }
    explicit Side(const Config& cfg, QpCap cap = {256, 256, 16, 16, 256}, uint32_t cqe = 4096)
        : emu(std::make_unique<Emulator>(with_env(cfg)))
    {
        emu->set_async_event_handler([this](const AsyncEvent& e) {
            std::lock_guard<std::mutex> g(events.lock);
            events.async.push_back(e);
        });
        EXPECT_EQ(emu->alloc_pd(&pd), 0);
        EXPECT_EQ(emu->create_cq(cqe, &scq), 0);
        EXPECT_EQ(emu->create_cq(cqe, &rcq), 0);
        QpInitAttr ia;
        ia.send_cq = scq;
        ia.recv_cq = rcq;
        ia.cap = cap;
        EXPECT_EQ(emu->create_qp(pd, ia, &qp), 0);
        QpAttr a;
        a.qp_state = QpState::init;
        a.qp_access_flags = access_local_write | access_remote_write | access_remote_read | access_remote_atomic;
        EXPECT_EQ(qp->modify(a, qp_attr_state | qp_attr_access_flags), 0);
        qp->set_connection_event_handler([this](QpConnectionEvent e) {
            std::lock_guard<std::mutex> g(events.lock);
            events.conn.push_back(e);
        });
    }
    ~Side()
    {
        // Emulator teardown frees every object and joins the engine.
        emu.reset();
    }

    MemoryRegion* reg(void* p, size_t len, uint32_t access = access_local_write | access_remote_write |
                                                             access_remote_read)
    {
        MemoryRegion* mr = nullptr;
        EXPECT_EQ(emu->reg_mr(pd, p, len, reinterpret_cast<uint64_t>(p), access, &mr), 0);
        return mr;
    }

    // Poll `cq` until n completions arrived or the deadline passed.
    std::vector<Completion> wait(CompletionQueue* cq, size_t n, std::chrono::milliseconds timeout = 10s)
    {
        std::vector<Completion> out;
        const auto end = std::chrono::steady_clock::now() + timeout;
        Completion wc[32];
        while (out.size() < n && std::chrono::steady_clock::now() < end) {
            const int k = cq->poll(wc, 32);
            for (int i = 0; i < k; ++i) out.push_back(wc[i]);
            if (k == 0) std::this_thread::sleep_for(50us);
        }
        return out;
    }
    bool wait_state(QpState s, std::chrono::milliseconds timeout = 5s)
    {
        const auto end = std::chrono::steady_clock::now() + timeout;
        while (std::chrono::steady_clock::now() < end) {
            Completion wc[8];
            scq->poll(wc, 0);
            if (qp->state() == s) return true;
            std::this_thread::sleep_for(1ms);
        }
        return qp->state() == s;
    }

    int post_recv(void* buf, uint32_t len, MemoryRegion* mr, uint64_t wr_id = 0)
    {
        Sge sge{reinterpret_cast<uint64_t>(buf), len, mr ? mr->lkey() : 0};
        RecvWr wr{wr_id, &sge, 1};
        size_t bad;
        return qp->post_recv(&wr, 1, &bad);
    }
    int post_send(WrOpcode op, void* buf, uint32_t len, MemoryRegion* mr, uint64_t wr_id = 0,
                  uint64_t remote_addr = 0, uint32_t rkey = 0, uint32_t flags = send_signaled,
                  uint32_t inv = 0)
    {
        return post_send_at(op, reinterpret_cast<uint64_t>(buf), len, mr, wr_id, remote_addr, rkey, flags, inv);
    }
    // The same with the local address as the MR's iova, which need not be a
    // pointer (regions not registered at their address).
    int post_send_at(WrOpcode op, uint64_t addr, uint32_t len, MemoryRegion* mr, uint64_t wr_id = 0,
                     uint64_t remote_addr = 0, uint32_t rkey = 0, uint32_t flags = send_signaled,
                     uint32_t inv = 0)
    {
        Sge sge{addr, len, mr ? mr->lkey() : 0};
        SendWr wr;
        wr.wr_id = wr_id;
        wr.opcode = op;
        wr.send_flags = flags;
        wr.sg_list = &sge;
        wr.num_sge = 1;
        wr.remote_addr = remote_addr;
        wr.rkey = rkey;
        wr.invalidate_rkey = inv;
        size_t bad;
        return qp->post_send(&wr, 1, &bad);
    }
    // An RFC 7306 atomic: the original value of the 8 octets at remote_addr
    // lands in *result (registered in mr).
    int post_atomic(WrOpcode op, uint64_t* result, MemoryRegion* mr, uint64_t wr_id, uint64_t remote_addr,
                    uint32_t rkey, uint64_t compare_add, uint64_t swap = 0, uint32_t flags = send_signaled)
    {
        Sge sge{reinterpret_cast<uint64_t>(result), sizeof *result, mr ? mr->lkey() : 0};
        SendWr wr;
        wr.wr_id = wr_id;
        wr.opcode = op;
        wr.send_flags = flags;
        wr.sg_list = &sge;
        wr.num_sge = 1;
        wr.remote_addr = remote_addr;
        wr.rkey = rkey;
        wr.compare_add = compare_add;
        wr.swap = swap;
        size_t bad;
        return qp->post_send(&wr, 1, &bad);
    }
};

struct PairOptions {
    bool crc = true;
    bool markers_a_to_b = false;
    bool markers_b_to_a = false;
    RtrType rtr = RtrType::none;
    uint16_t ird = 16, ord = 16;
    uint32_t mulpdu = 0;     // 0: from TCP_MAXSEG
    size_t proxy_chunk = 0;  // 0: direct connection; else re-segmenting proxy
    QpCap cap{256, 256, 16, 16, 256};
    // No wake-ups (first_fpdus.cpp): tests that count FPDUs see only their own.
    Config config = [] {
        Config c;
        c.peer_wakeup = false;
        return c;
    }();
};

// Side a = Initiator, side b = Responder.
struct LoopbackPair {
    std::unique_ptr<Side> a, b;
    std::unique_ptr<ResegmentingProxy> proxy;

    explicit LoopbackPair(const PairOptions& o = {})
    {
        a = std::make_unique<Side>(o.config, o.cap);
        b = std::make_unique<Side>(o.config, o.cap);
        auto [fa, fb] = tcp_pair();
        if (o.proxy_chunk) {
            auto [pa, fa2] = tcp_pair();  // a ↔ proxy-left
            auto [fb2, pb] = tcp_pair();  // proxy-right ↔ b
            ::close(fa);
            ::close(fb);
            fa = pa;
            fb = pb;
            proxy = std::make_unique<ResegmentingProxy>(fa2, fb2, o.proxy_chunk, 1234);
        }
        ConnectionParams pa, pb;
        pa.fd = fa;
        pa.role = ConnectionRole::initiator;
        pa.tx = {o.crc, o.markers_a_to_b};
        pa.rx = {o.crc, o.markers_b_to_a};
        pa.rtr = o.rtr;
        pa.ird = o.ird;
        pa.ord = o.ord;
        pa.mulpdu = o.mulpdu;
        pa.mulpdu_fixed = o.mulpdu != 0;
        pb = pa;
        pb.fd = fb;
        pb.role = ConnectionRole::responder;
        pb.tx = pa.rx;
        pb.rx = pa.tx;
        EXPECT_EQ(b->qp->attach_connection(pb), 0);
        EXPECT_EQ(a->qp->attach_connection(pa), 0);
    }
    ~LoopbackPair()
    {
        a.reset();
        b.reset();
        proxy.reset();
    }
};

// A 4 KiB buffer on each side, registered for local and remote write.
struct PairBuffers {
    std::vector<uint8_t> a = std::vector<uint8_t>(4096), b = std::vector<uint8_t>(4096);
    MemoryRegion* ma = nullptr;
    MemoryRegion* mb = nullptr;
    explicit PairBuffers(LoopbackPair& p) : ma(p.a->reg(a.data(), a.size())), mb(p.b->reg(b.data(), b.size())) {}
};

// Joins two QPs over a fresh loopback TCP connection with default
// ConnectionParams (CRC, no markers).  Returns the first attach error, 0 on
// success.
inline int attach_tcp_pair(QueuePair* initiator, QueuePair* responder)
{
    auto [fa, fb] = tcp_pair();
    ConnectionParams pa, pb;
    pa.fd = fa;
    pa.role = ConnectionRole::initiator;
    pb.fd = fb;
    pb.role = ConnectionRole::responder;
    if (const int rc = responder->attach_connection(pb)) return rc;
    return initiator->attach_connection(pa);
}

// A second pair of QPs on p's endpoints whose responder (on b, INIT with
// b_access) takes its receive WQEs from srq; max_sge for both directions.
// Use under ASSERT_NO_FATAL_FAILURE.
inline void connect_srq_qps(LoopbackPair& p, SharedReceiveQueue* srq, uint32_t max_sge, uint32_t b_access,
                            QueuePair** qa, QueuePair** qb)
{
    QpInitAttr ib;
    ib.send_cq = p.b->scq;
    ib.recv_cq = p.b->rcq;
    ib.srq = srq;
    ib.cap = {8, 0, max_sge, 0, 0};
    ASSERT_EQ(p.b->emu->create_qp(p.b->pd, ib, qb), 0);
    QpAttr at;
    at.qp_state = QpState::init;
    at.qp_access_flags = b_access;
    ASSERT_EQ((*qb)->modify(at, qp_attr_state | qp_attr_access_flags), 0);
    QpInitAttr ia;
    ia.send_cq = p.a->scq;
    ia.recv_cq = p.a->rcq;
    ia.cap = {8, 8, max_sge, max_sge, 0};
    ASSERT_EQ(p.a->emu->create_qp(p.a->pd, ia, qa), 0);
    ASSERT_EQ((*qa)->modify(at, qp_attr_state), 0);
    ASSERT_EQ(attach_tcp_pair(*qa, *qb), 0);
}

// Poll a condition every millisecond until it holds or `timeout` passed.
inline bool wait_until(const std::function<bool()>& cond, std::chrono::milliseconds timeout)
{
    const auto end = std::chrono::steady_clock::now() + timeout;
    while (!cond() && std::chrono::steady_clock::now() < end) std::this_thread::sleep_for(1ms);
    return cond();
}

// Pair options with Config::rnr_wait_ms set.
inline PairOptions with_rnr_wait(uint32_t ms)
{
    PairOptions o;
    o.config.rnr_wait_ms = ms;
    return o;
}

inline void fill_pattern(std::vector<uint8_t>& v, uint32_t seed)
{
    uint32_t x = seed * 2654435761u + 1;
    for (auto& c : v) {
        x = x * 1664525u + 1013904223u;
        c = static_cast<uint8_t>(x >> 24);
    }
}

}  // namespace iwemu::test
