// Issue 26: both ends of a connection in this process (loopback through
// librdmacm, the distro's libibverbs), an RDMA Write's successful completion
// at the sender means the data is placed at the target -- as kernel siw on
// loopback gives it, and as rdma-core's tests (rdma_traffic) expect:
//   - placed: Writes of 1 octet to 1 MiB (multi-FPDU), both directions,
//     each checked in full right after its completion, many times;
//   - crossed: both sides Write to each other at once from two threads,
//     each checking what it received as soon as its own Write completed
//     (two QPs placing for each other: no deadlock, no stale data);
//   - blocked: a Send the server has no receive for parks its receive
//     path; a Write behind it still completes at once (the sender does not
//     wait for the placement that cannot come yet), and is placed once a
//     receive is posted.
// Every wait is bounded; alarm() ends a hang.
#include <infiniband/verbs.h>
#include <rdma/rdma_cma.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <thread>
#include <vector>

#include "check.h"
#include "cm_loopback.h"
#include "rc_qp_attr.h"

namespace {

constexpr int kTimeoutMs = 5000;
constexpr size_t kBuf = 1 << 20;
using Clock = std::chrono::steady_clock;

struct Side {
    rdma_cm_id* id = nullptr;
    ibv_pd* pd = nullptr;
    ibv_cq* cq = nullptr;
    ibv_mr* mr = nullptr;
    // [0, kBuf): Write source; [kBuf, 2 kBuf): what the peer Writes into.
    std::vector<unsigned char> buf = std::vector<unsigned char>(2 * kBuf);
    unsigned char* src() { return buf.data(); }
    unsigned char* dst() { return buf.data() + kBuf; }
};

void setup(Side& s, rdma_cm_id* id)
{
    s.id = id;
    s.pd = ibv_alloc_pd(id->verbs);
    REQUIRE(s.pd);
    s.cq = ibv_create_cq(id->verbs, 64, nullptr, nullptr, 0);
    REQUIRE(s.cq);
    s.mr = ibv_reg_mr(s.pd, s.buf.data(), s.buf.size(),
                      IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ);
    REQUIRE(s.mr);
    ibv_qp_init_attr ia = iwemu::test::rc_qp_attr(s.cq, {32, 32, 1, 1, 0});
    REQUIRE(rdma_create_qp(id, s.pd, &ia) == 0);
}

struct Pair {
    iwemu::test::CmLoopback cm;
    Side c, s;
};

void connect_pair(Pair& p)
{
    p.cm = iwemu::test::cm_loopback_resolved();
    setup(p.c, p.cm.client);
    rdma_conn_param cp = iwemu::test::cm_conn_param();
    setup(p.s, iwemu::test::cm_loopback_connect(p.cm, cp));
    iwemu::test::cm_loopback_accept(p.cm, p.s.id, cp);
}

void close_pair(Pair& p)
{
    rdma_disconnect(p.c.id);
    for (Side* side : {&p.c, &p.s}) {
        rdma_destroy_qp(side->id);
        CHECK(ibv_dereg_mr(side->mr) == 0);
        CHECK(ibv_destroy_cq(side->cq) == 0);
        CHECK(ibv_dealloc_pd(side->pd) == 0);
        CHECK(rdma_destroy_id(side->id) == 0);
    }
    iwemu::test::cm_loopback_release(p.cm);
}

// Busy-polls (as rdma-core's poll_cq does) for one completion.
bool next_wc(ibv_cq* cq, ibv_wc* wc)
{
    const auto end = Clock::now() + std::chrono::milliseconds(kTimeoutMs);
    while (Clock::now() < end) {
        const int n = ibv_poll_cq(cq, 1, wc);
        if (n < 0) return false;
        if (n == 1) return true;
    }
    return false;
}

int post_write(Side& from, Side& to, uint32_t len, uint64_t wr_id)
{
    ibv_sge sge{reinterpret_cast<uintptr_t>(from.src()), len, from.mr->lkey};
    ibv_send_wr wr{};
    wr.wr_id = wr_id;
    wr.opcode = IBV_WR_RDMA_WRITE;
    wr.sg_list = &sge;
    wr.num_sge = 1;
    wr.send_flags = IBV_SEND_SIGNALED;
    wr.wr.rdma.remote_addr = reinterpret_cast<uintptr_t>(to.dst());
    wr.wr.rdma.rkey = to.mr->rkey;
    ibv_send_wr* bad = nullptr;
    return ibv_post_send(from.id->qp, &wr, &bad);
}

// Writes `len` octets of a new value; true when its completion came and the
// target held all of them right then.
bool write_and_check(Side& from, Side& to, uint32_t len, unsigned char value)
{
    std::memset(from.src(), value, len);
    if (post_write(from, to, len, value) != 0) return false;
    ibv_wc wc{};
    if (!next_wc(from.cq, &wc) || wc.status != IBV_WC_SUCCESS || wc.opcode != IBV_WC_RDMA_WRITE) return false;
    for (size_t i = 0; i < len; ++i)
        if (to.dst()[i] != value) {
            std::fprintf(stderr, "len %u: octet %zu is %u, not %u, at the completion\n", len, i, to.dst()[i], value);
            return false;
        }
    return true;
}

void placed(Pair& p)
{
    const struct {
        uint32_t len;
        int iterations;
    } cases[] = {{1, 2000}, {100, 2000}, {4096, 1000}, {65536, 300}, {kBuf, 40}};
    unsigned char v = 0;
    for (const auto& c : cases) {
        int stale = 0;
        for (int i = 0; i < c.iterations; ++i) {
            v = static_cast<unsigned char>(v % 250 + 1);
            Side& from = i % 2 ? p.s : p.c;
            Side& to = i % 2 ? p.c : p.s;
            if (!write_and_check(from, to, c.len, v)) ++stale;
        }
        if (stale) std::fprintf(stderr, "placed: %d of %d Writes of %u octets\n", c.iterations - stale, c.iterations, c.len);
        CHECK(stale == 0);
    }
}

void crossed(Pair& p)
{
    constexpr uint32_t len = 65536;
    constexpr int iterations = 500;
    std::atomic<int> stale{0};
    auto run = [&](Side& from, Side& to, unsigned char base) {
        for (int i = 0; i < iterations; ++i) {
            const unsigned char v = static_cast<unsigned char>(base + i % 100);
            if (!write_and_check(from, to, len, v)) stale.fetch_add(1);
        }
    };
    std::thread t([&] { run(p.s, p.c, 1); });
    run(p.c, p.s, 101);
    t.join();
    CHECK(stale.load() == 0);
}

void blocked(Pair& p)
{
    constexpr uint32_t len = 65536;
    std::memset(p.s.dst(), 0, len);
    std::memset(p.c.src(), 7, len);
    // A Send the server has no receive for, then a Write behind it.
    ibv_sge sge{reinterpret_cast<uintptr_t>(p.c.src()), 16, p.c.mr->lkey};
    ibv_send_wr send{};
    send.wr_id = 1;
    send.opcode = IBV_WR_SEND;
    send.sg_list = &sge;
    send.num_sge = 1;
    send.send_flags = IBV_SEND_SIGNALED;
    ibv_send_wr* bad = nullptr;
    REQUIRE(ibv_post_send(p.c.id->qp, &send, &bad) == 0);
    const auto start = Clock::now();
    REQUIRE(post_write(p.c, p.s, len, 2) == 0);
    ibv_wc wc[2]{};
    CHECK(next_wc(p.c.cq, &wc[0]) && wc[0].status == IBV_WC_SUCCESS && wc[0].wr_id == 1);
    CHECK(next_wc(p.c.cq, &wc[1]) && wc[1].status == IBV_WC_SUCCESS && wc[1].wr_id == 2);
    const auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - start).count();
    // The server's wait for a receive lasts rnr_wait_ms (3 s): not waited for.
    if (ms >= 500) std::fprintf(stderr, "blocked: the completions took %lld ms\n", static_cast<long long>(ms));
    CHECK(ms < 500);
    CHECK(p.s.dst()[0] == 0);  // behind the parked Send: not placed yet
    // A receive releases the Send, and the Write behind it is placed.
    ibv_sge rsge{reinterpret_cast<uintptr_t>(p.s.src()), 64, p.s.mr->lkey};
    ibv_recv_wr rwr{};
    rwr.wr_id = 3;
    rwr.sg_list = &rsge;
    rwr.num_sge = 1;
    ibv_recv_wr* rbad = nullptr;
    REQUIRE(ibv_post_recv(p.s.id->qp, &rwr, &rbad) == 0);
    ibv_wc rwc{};
    CHECK(next_wc(p.s.cq, &rwc) && rwc.status == IBV_WC_SUCCESS && rwc.opcode == IBV_WC_RECV && rwc.byte_len == 16);
    const auto end = Clock::now() + std::chrono::milliseconds(kTimeoutMs);
    while (p.s.dst()[len - 1] != 7 && Clock::now() < end) {
        ibv_wc none;
        ibv_poll_cq(p.s.cq, 1, &none);  // drives the receive path
    }
    CHECK(std::memcmp(p.s.dst(), p.c.src(), len) == 0);
    // And the next Write is placed at its completion again.
    CHECK(write_and_check(p.c, p.s, len, 9));
}

}  // namespace

int main()
{
    alarm(50);  // a deadlock ends the test instead of the CI run
    Pair p;
    connect_pair(p);
    placed(p);
    crossed(p);
    blocked(p);
    close_pair(p);
    return iwemu::test::check_exit_status("verbs_write_placed", "placed at completion, both ways, not waiting when blocked");
}
