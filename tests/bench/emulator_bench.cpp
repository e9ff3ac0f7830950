// Emulator data path vs. raw TCP, same binary, same run, same loopback:
//   * 64 KiB RDMA Write bandwidth and 64 KiB Send bandwidth (queue depth 32)
//   * 8-byte ping-pong latency (Send/Recv, inline, busy-polling the CQ)
// next to a raw TCP stream of 64 KiB writes and a raw 8-byte ping-pong
// (busy-polling non-blocking recv, the same polling discipline).
// Prints each figure and the ratio; targets: bandwidth ≥ 0.9x, latency ≤ 1.2x.
//
//   emulator_bench [seconds-per-test (default 2)] [--crc=0|1] [--rounds=N (default 3, best of)]
#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "emulator/emulator.h"

using namespace iwemu;
using Clock = std::chrono::steady_clock;

namespace {

double g_seconds = 2.0;
bool g_crc = true;
int g_rounds = 3;
bool g_lat_only = false;

std::pair<int, int> tcp_pair()
{
    int ls = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    bind(ls, reinterpret_cast<sockaddr*>(&a), sizeof a);
    listen(ls, 4);
    socklen_t len = sizeof a;
    getsockname(ls, reinterpret_cast<sockaddr*>(&a), &len);
    int c = ::socket(AF_INET, SOCK_STREAM, 0);
    if (connect(c, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0) std::abort();
    int s = accept(ls, nullptr, nullptr);
    close(ls);
    int one = 1;
    setsockopt(c, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    setsockopt(s, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    return {c, s};
}

// ---------------------------------------------------------------- raw TCP

double raw_bandwidth(size_t msg)
{
    auto [c, s] = tcp_pair();
    std::atomic<bool> stop{false};
    std::vector<uint8_t> rbuf(msg);
    std::thread reader([&, s = s] {
        while (read(s, rbuf.data(), rbuf.size()) > 0) {
        }
    });
    std::vector<uint8_t> buf(msg, 1);
    uint64_t bytes = 0;
    const auto t0 = Clock::now();
    const auto end = t0 + std::chrono::duration<double>(g_seconds);
    while (Clock::now() < end) {
        size_t off = 0;
        while (off < msg) {
            ssize_t n = write(c, buf.data() + off, msg - off);
            if (n <= 0) std::abort();
            off += static_cast<size_t>(n);
        }
        bytes += msg;
    }
    const double secs = std::chrono::duration<double>(Clock::now() - t0).count();
    shutdown(c, SHUT_WR);
    reader.join();
    close(c);
    close(s);
    return static_cast<double>(bytes) / secs / 1e9;
}

// busy: spin on non-blocking recv (the polling discipline of the emulator
// test); blocking: plain blocking read (qperf tcp_lat style).
double raw_latency_us(size_t msg, bool busy)
{
    auto [c, s] = tcp_pair();
    std::atomic<bool> stop{false};
    const int flags = busy ? MSG_DONTWAIT : 0;
    auto recv_all = [flags](int fd, uint8_t* p, size_t n) {
        size_t got = 0;
        while (got < n) {
            ssize_t k = recv(fd, p + got, n - got, flags);
            if (k > 0) got += static_cast<size_t>(k);
            else if (k == 0) return false;
        }
        return true;
    };
    std::thread pong([&, s = s] {
        uint8_t b[64];
        while (recv_all(s, b, msg)) {
            if (write(s, b, msg) != static_cast<ssize_t>(msg)) break;
        }
    });
    uint8_t b[64] = {};
    uint64_t iters = 0;
    const auto t0 = Clock::now();
    const auto end = t0 + std::chrono::duration<double>(g_seconds);
    while (Clock::now() < end) {
        for (int i = 0; i < 100; ++i) {
            if (write(c, b, msg) != static_cast<ssize_t>(msg)) std::abort();
            if (!recv_all(c, b, msg)) std::abort();
        }
        iters += 100;
    }
    const double secs = std::chrono::duration<double>(Clock::now() - t0).count();
    shutdown(c, SHUT_WR);
    pong.join();
    close(c);
    close(s);
    return secs / static_cast<double>(iters) / 2 * 1e6;  // one-way = half a round trip
}

// --------------------------------------------------------------- emulator

struct Host {
    std::unique_ptr<Emulator> emu;
    ProtectionDomain* pd = nullptr;
    CompletionQueue* cq = nullptr;
    QueuePair* qp = nullptr;
    Host()
    {
        Config cfg;
        cfg.crc = g_crc;
        if (const char* l = std::getenv("IWEMU_LOG")) cfg.set("log", l, nullptr);
        emu = std::make_unique<Emulator>(cfg);
        emu->alloc_pd(&pd);
        emu->create_cq(4096, &cq);
        QpInitAttr ia;
        ia.send_cq = ia.recv_cq = cq;
        ia.cap = {256, 1024, 1, 1, 64};  // deep RQ: a Send needs a posted receive (no RNR retry in iWARP)
        emu->create_qp(pd, ia, &qp);
        QpAttr a;
        a.qp_state = QpState::init;
        qp->modify(a, qp_attr_state);
    }
    MemoryRegion* reg(void* p, size_t n)
    {
        MemoryRegion* mr = nullptr;
        emu->reg_mr(pd, p, n, reinterpret_cast<uint64_t>(p), access_local_write | access_remote_write, &mr);
        return mr;
    }
};

void connect_hosts(Host& a, Host& b)
{
    auto [fa, fb] = tcp_pair();
    ConnectionParams pa;
    pa.fd = fa;
    pa.tx = pa.rx = {g_crc, false};
    ConnectionParams pb = pa;
    pb.fd = fb;
    pb.role = ConnectionRole::responder;
    if (b.qp->attach_connection(pb) != 0 || a.qp->attach_connection(pa) != 0) std::abort();
}

double emu_bandwidth(size_t msg, bool use_send)
{
    constexpr int depth = 32;
    // Buffers outlive the endpoints: receives are still posted (and data may
    // still be arriving) when the measurement ends.
    std::vector<uint8_t> src(msg, 1), dst(msg * depth);
    Host a, b;
    connect_hosts(a, b);
    MemoryRegion* smr = a.reg(src.data(), src.size());
    MemoryRegion* dmr = b.reg(dst.data(), dst.size());
    std::atomic<bool> stop{false};
    std::atomic<uint64_t> received{0};  // application-level credit (both ends live in this process)
    std::thread receiver;
    if (use_send) {
        // Sends complete when TCP took them, so the sender can be a socket
        // buffer ahead of the receiver: keep the whole RQ posted.
        for (int i = 0; i < 1024; ++i) {
            Sge s{reinterpret_cast<uint64_t>(dst.data() + (i % depth) * msg), static_cast<uint32_t>(msg), dmr->lkey()};
            RecvWr rw{static_cast<uint64_t>(i), &s, 1};
            size_t bad;
            b.qp->post_recv(&rw, 1, &bad);
        }
        receiver = std::thread([&] {
            Completion wc[64];
            while (!stop.load(std::memory_order_relaxed)) {
                const int n = b.cq->poll(wc, 64);
                for (int i = 0; i < n; ++i) {
                    Sge s{reinterpret_cast<uint64_t>(dst.data() + (wc[i].wr_id % depth) * msg),
                          static_cast<uint32_t>(msg), dmr->lkey()};
                    RecvWr rw{wc[i].wr_id, &s, 1};
                    size_t bad;
                    b.qp->post_recv(&rw, 1, &bad);
                }
                received.fetch_add(static_cast<uint64_t>(n), std::memory_order_release);
                if (n == 0) std::this_thread::yield();
            }
        });
    }
    Sge sge{reinterpret_cast<uint64_t>(src.data()), static_cast<uint32_t>(msg), smr->lkey()};
    SendWr wr;
    wr.opcode = use_send ? WrOpcode::send : WrOpcode::rdma_write;
    wr.send_flags = send_signaled;
    wr.sg_list = &sge;
    wr.num_sge = 1;
    wr.rkey = dmr->rkey();
    uint64_t posted = 0, completed = 0;
    Completion wc[64];
    const auto t0 = Clock::now();
    const auto end = t0 + std::chrono::duration<double>(g_seconds);
    while (Clock::now() < end) {
        // Sends: never more in flight than receives posted (iWARP has no RNR retry).
        while (posted - completed < depth && (!use_send || posted - received.load(std::memory_order_acquire) < 960)) {
            wr.wr_id = posted;
            wr.remote_addr = reinterpret_cast<uint64_t>(dst.data() + (posted % depth) * msg);
            size_t bad;
            if (a.qp->post_send(&wr, 1, &bad) != 0) std::abort();
            ++posted;
        }
        const int n = a.cq->poll(wc, 64);
        for (int i = 0; i < n; ++i)
            if (wc[i].status != WcStatus::success) {
                std::fprintf(stderr, "completion error %u\n", static_cast<unsigned>(wc[i].status));
                std::abort();
            }
        completed += static_cast<uint64_t>(n);
    }
    while (completed < posted) completed += static_cast<uint64_t>(std::max(0, a.cq->poll(wc, 64)));
    const double secs = std::chrono::duration<double>(Clock::now() - t0).count();
    stop = true;
    if (receiver.joinable()) receiver.join();
    return static_cast<double>(completed * msg) / secs / 1e9;
}

double emu_latency_us(size_t msg)
{
    std::vector<uint8_t> abuf(64), bbuf(64);
    Host a, b;
    connect_hosts(a, b);
    MemoryRegion* amr = a.reg(abuf.data(), 64);
    MemoryRegion* bmr = b.reg(bbuf.data(), 64);
    auto post_recv = [](Host& h, uint8_t* p, MemoryRegion* mr) {
        Sge s{reinterpret_cast<uint64_t>(p), 64, mr->lkey()};
        RecvWr rw{1, &s, 1};
        size_t bad;
        h.qp->post_recv(&rw, 1, &bad);
    };
    auto send = [msg](Host& h, uint8_t* p) {
        Sge s{reinterpret_cast<uint64_t>(p), static_cast<uint32_t>(msg), 0};
        SendWr wr;
        wr.opcode = WrOpcode::send;
        wr.send_flags = send_inline;  // unsignaled, like perftest's latency tests
        wr.sg_list = &s;
        wr.num_sge = 1;
        size_t bad;
        if (h.qp->post_send(&wr, 1, &bad) != 0) std::abort();
    };
    // Wait for one receive completion (skipping nothing else: sends are unsignaled).
    auto wait_recv = [](Host& h, std::atomic<bool>* stop) {
        Completion wc;
        for (;;) {
            if (h.cq->poll(&wc, 1) == 1) return wc.status == WcStatus::success;
            if (stop && stop->load(std::memory_order_relaxed)) return false;
        }
    };
    for (int i = 0; i < 8; ++i) {
        post_recv(a, abuf.data(), amr);
        post_recv(b, bbuf.data(), bmr);
    }
    std::atomic<bool> stop{false};
    std::thread pong([&] {
        while (wait_recv(b, &stop)) {
            post_recv(b, bbuf.data(), bmr);
            send(b, bbuf.data());
        }
    });
    uint64_t iters = 0;
    const auto t0 = Clock::now();
    const auto end = t0 + std::chrono::duration<double>(g_seconds);
    while (Clock::now() < end) {
        for (int i = 0; i < 100; ++i) {
            send(a, abuf.data());
            if (!wait_recv(a, nullptr)) std::abort();
            post_recv(a, abuf.data(), amr);
        }
        iters += 100;
    }
    const double secs = std::chrono::duration<double>(Clock::now() - t0).count();
    stop = true;
    pong.join();
    return secs / static_cast<double>(iters) / 2 * 1e6;
}

}  // namespace

int main(int argc, char** argv)
{
    for (int i = 1; i < argc; ++i) {
        if (std::strncmp(argv[i], "--crc=", 6) == 0) g_crc = argv[i][6] == '1';
        else if (std::strncmp(argv[i], "--rounds=", 9) == 0) g_rounds = std::max(1, std::atoi(argv[i] + 9));
        else if (std::strcmp(argv[i], "--latency-only") == 0) g_lat_only = true;
        else g_seconds = std::atof(argv[i]);
    }
    if (g_seconds <= 0) g_seconds = 2.0;
    const size_t bw_msg = 64 * 1024;
    std::printf("iwemu emulator vs raw TCP over loopback (%.1f s per test, best of %d, CRC %s)\n", g_seconds, g_rounds,
                g_crc ? "on" : "off");
    // Interleaved rounds, best of each: other load on the machine hits both sides alike.
    double raw_bw = 0, write_bw = 0, send_bw = 0, raw_lat = 1e9, emu_lat = 1e9;
    for (int r = 0; r < g_rounds; ++r) {
        if (!g_lat_only) {
            raw_bw = std::max(raw_bw, raw_bandwidth(bw_msg));
            write_bw = std::max(write_bw, emu_bandwidth(bw_msg, false));
            send_bw = std::max(send_bw, emu_bandwidth(bw_msg, true));
        }
        // The better of the two raw disciplines is the reference.
        raw_lat = std::min({raw_lat, raw_latency_us(8, true), raw_latency_us(8, false)});
        emu_lat = std::min(emu_lat, emu_latency_us(8));
    }
    std::printf("%-32s %10.3f GB/s\n", "raw TCP 64 KiB stream", raw_bw);
    std::printf("%-32s %10.3f GB/s   ratio %.2fx (target >= 0.90)\n", "RDMA Write 64 KiB", write_bw, write_bw / raw_bw);
    std::printf("%-32s %10.3f GB/s   ratio %.2fx (target >= 0.90)\n", "Send 64 KiB", send_bw, send_bw / raw_bw);
    std::printf("%-32s %10.2f us\n", "raw TCP 8 B ping-pong (1-way, best)", raw_lat);
    std::printf("%-32s %10.2f us   ratio %.2fx (target <= 1.20)\n", "Send 8 B ping-pong (1-way)", emu_lat,
                emu_lat / raw_lat);
    return 0;
}
