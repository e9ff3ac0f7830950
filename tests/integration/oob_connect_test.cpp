// QPs connected with ibv_modify_qp(RTR, AV + dest QPN) instead of rdma_cm,
// inside one process under iwemu-run (docs/oob-connect.md):
// - work requests posted before the connection exists wait, none is lost or
//   reordered; both QPs "connect" (active/active) and exactly one stream forms;
// - a wrong dest QPN is refused by the peer: both QPs go to ERROR with
//   flushed completions and IBV_EVENT_QP_FATAL, in bounded time;
// - an unreachable peer does the same;
// - more than 256 QPs: the QPN space spans several endpoint ports and the
//   QPs on a later port connect too.
// Run with IWEMU_OOB_TIMEOUT_MS / IWEMU_MPA_TIMEOUT_MS small (CMake does).
#include <arpa/inet.h>
#include <infiniband/verbs.h>
#include <poll.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <set>
#include <thread>
#include <vector>

#include "check.h"
#include "rc_qp_attr.h"

namespace {

using Clock = std::chrono::steady_clock;

struct Env {
    ibv_context* ctx = nullptr;
    ibv_pd* pd = nullptr;
    ibv_mr* mr = nullptr;
    std::vector<uint8_t> buf = std::vector<uint8_t>(1 << 20);
    ibv_gid gid{};
};

struct Qp {
    ibv_cq* cq = nullptr;
    ibv_qp* qp = nullptr;
};

Qp make_qp(Env& e, int depth = 128)
{
    Qp q;
    q.cq = ibv_create_cq(e.ctx, depth * 2, nullptr, nullptr, 0);
    REQUIRE(q.cq);
    const auto d = static_cast<uint32_t>(depth);
    ibv_qp_init_attr ia = iwemu::test::rc_qp_attr(q.cq, {d, d, 1, 1, 0});
    q.qp = ibv_create_qp(e.pd, &ia);
    REQUIRE(q.qp);
    ibv_qp_attr a{};
    a.qp_state = IBV_QPS_INIT;
    a.port_num = 1;
    a.qp_access_flags = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ;
    REQUIRE(ibv_modify_qp(q.qp, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS) == 0);
    return q;
}

void destroy(Qp& q)
{
    CHECK(ibv_destroy_qp(q.qp) == 0);
    CHECK(ibv_destroy_cq(q.cq) == 0);
}

// perftest's RTR and RTS masks.
int rtr(Qp& q, const ibv_gid& dgid, uint32_t dest_qpn)
{
    ibv_qp_attr a{};
    a.qp_state = IBV_QPS_RTR;
    a.path_mtu = IBV_MTU_1024;
    a.dest_qp_num = dest_qpn;
    a.rq_psn = 0;
    a.max_dest_rd_atomic = 1;
    a.min_rnr_timer = 12;
    a.ah_attr.is_global = 1;
    a.ah_attr.grh.dgid = dgid;
    a.ah_attr.grh.sgid_index = 0;
    a.ah_attr.grh.hop_limit = 0xFF;
    a.ah_attr.port_num = 1;
    return ibv_modify_qp(q.qp, &a,
                         IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN |
                             IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER);
}

int rts(Qp& q)
{
    ibv_qp_attr a{};
    a.qp_state = IBV_QPS_RTS;
    a.timeout = 14;
    a.retry_cnt = 7;
    a.rnr_retry = 7;
    a.max_rd_atomic = 1;
    return ibv_modify_qp(q.qp, &a,
                         IBV_QP_STATE | IBV_QP_SQ_PSN | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY |
                             IBV_QP_MAX_QP_RD_ATOMIC);
}

int post_send(Env& e, Qp& q, size_t off, uint32_t len, uint64_t id)
{
    ibv_sge s{reinterpret_cast<uint64_t>(e.buf.data() + off), len, e.mr->lkey};
    ibv_send_wr wr{};
    wr.wr_id = id;
    wr.sg_list = &s;
    wr.num_sge = 1;
    wr.opcode = IBV_WR_SEND;
    wr.send_flags = IBV_SEND_SIGNALED;
    ibv_send_wr* bad = nullptr;
    return ibv_post_send(q.qp, &wr, &bad);
}

int post_recv(Env& e, Qp& q, size_t off, uint32_t len, uint64_t id)
{
    ibv_sge s{reinterpret_cast<uint64_t>(e.buf.data() + off), len, e.mr->lkey};
    ibv_recv_wr wr{};
    wr.wr_id = id;
    wr.sg_list = &s;
    wr.num_sge = 1;
    ibv_recv_wr* bad = nullptr;
    return ibv_post_recv(q.qp, &wr, &bad);
}

std::vector<ibv_wc> wait_wc(Qp& q, size_t n, std::chrono::milliseconds limit)
{
    std::vector<ibv_wc> out;
    const auto end = Clock::now() + limit;
    while (out.size() < n && Clock::now() < end) {
        ibv_wc wc[16];
        int k = ibv_poll_cq(q.cq, 16, wc);
        if (k < 0) break;
        out.insert(out.end(), wc, wc + k);
        if (k == 0) std::this_thread::sleep_for(std::chrono::microseconds(200));
    }
    return out;
}

ibv_qp_state state_of(Qp& q)
{
    ibv_qp_attr a{};
    ibv_qp_init_attr ia{};
    if (ibv_query_qp(q.qp, &a, IBV_QP_STATE, &ia) != 0) return IBV_QPS_UNKNOWN;
    return a.qp_state;
}

// QP_FATAL async events for these QPs within the limit.
std::set<ibv_qp*> wait_fatal(Env& e, std::set<ibv_qp*> want, std::chrono::milliseconds limit)
{
    std::set<ibv_qp*> got;
    const auto end = Clock::now() + limit;
    while (got.size() < want.size() && Clock::now() < end) {
        pollfd p{e.ctx->async_fd, POLLIN, 0};
        if (poll(&p, 1, 100) <= 0) continue;
        ibv_async_event ev{};
        if (ibv_get_async_event(e.ctx, &ev) != 0) break;
        if (ev.event_type == IBV_EVENT_QP_FATAL && want.count(ev.element.qp)) got.insert(ev.element.qp);
        ibv_ack_async_event(&ev);
    }
    return got;
}

// Work posted before the peer exists waits; every message arrives, in order.
void check_post_before_connect(Env& e)
{
    constexpr int n = 64;
    Qp a = make_qp(e), b = make_qp(e);
    auto* words = reinterpret_cast<uint32_t*>(e.buf.data());
    for (int i = 0; i < n; ++i) words[i] = 1000 + i;  // A's messages at 0..255
    REQUIRE(rtr(a, e.gid, b.qp->qp_num) == 0);
    REQUIRE(rts(a) == 0);
    for (int i = 0; i < n; ++i) CHECK(post_send(e, a, i * 4, 4, i) == 0);
    std::this_thread::sleep_for(std::chrono::milliseconds(200));  // the peer is not even at RTR
    for (int i = 0; i < n; ++i) CHECK(post_recv(e, b, 4096 + i * 4, 4, 100 + i) == 0);
    REQUIRE(rtr(b, e.gid, a.qp->qp_num) == 0);
    REQUIRE(rts(b) == 0);
    auto sent = wait_wc(a, n, std::chrono::seconds(10));
    auto recvd = wait_wc(b, n, std::chrono::seconds(10));
    CHECK(sent.size() == size_t(n) && recvd.size() == size_t(n));
    for (size_t i = 0; i < recvd.size(); ++i) {
        CHECK(recvd[i].status == IBV_WC_SUCCESS && recvd[i].wr_id == 100 + i && recvd[i].byte_len == 4);
        CHECK(words[1024 + i] == 1000 + i);
    }
    for (auto& wc : sent) CHECK(wc.status == IBV_WC_SUCCESS);
    CHECK(state_of(a) == IBV_QPS_RTS && state_of(b) == IBV_QPS_RTS);
    // The other direction works on the same (single) stream.
    words[512] = 77;
    CHECK(post_recv(e, a, 8192, 4, 7) == 0);
    CHECK(post_send(e, b, 2048, 4, 8) == 0);
    auto r = wait_wc(a, 1, std::chrono::seconds(5));
    CHECK(r.size() == 1 && r[0].status == IBV_WC_SUCCESS && words[2048] == 77);
    CHECK(wait_wc(b, 1, std::chrono::seconds(5)).size() == 1);
    destroy(a);
    destroy(b);
    std::printf("post before connect: %d messages in order\n", n);
}

// Both QPs end in ERROR with a flushed Send and QP_FATAL, within `limit`.
void check_both_fail(Env& e, Qp& x, Qp* y, std::chrono::milliseconds limit, const char* what)
{
    const auto t0 = Clock::now();
    std::set<ibv_qp*> want{x.qp};
    if (y) want.insert(y->qp);
    auto fatal = wait_fatal(e, want, limit);
    const auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - t0).count();
    CHECK(fatal.size() == want.size());
    for (Qp* q : {&x, y}) {
        if (!q) continue;
        CHECK(state_of(*q) == IBV_QPS_ERR);
        auto wc = wait_wc(*q, 2, std::chrono::seconds(2));  // the Send and the Receive
        CHECK(wc.size() == 2);
        for (auto& c : wc) CHECK(c.status == IBV_WC_WR_FLUSH_ERR);
    }
    std::printf("%s: QP_FATAL after %lld ms\n", what, static_cast<long long>(ms));
}

void check_wrong_dest_qpn(Env& e)
{
    Qp a = make_qp(e), b = make_qp(e);
    const uint32_t wrong = b.qp->qp_num ^ 0x80;  // a slot of B's port no QP holds
    // Either side may be the initiator: A dials a missing QP (rejected: no
    // such QP), or B dials A, which expects another QPN (rejected: mismatch).
    REQUIRE(rtr(a, e.gid, a.qp->qp_num == wrong ? wrong ^ 1 : b.qp->qp_num) == 0);
    REQUIRE(rtr(b, e.gid, a.qp->qp_num ^ 0x40) == 0);
    REQUIRE(rts(a) == 0 && rts(b) == 0);
    for (Qp* q : {&a, &b}) {
        CHECK(post_recv(e, *q, 0, 4, 1) == 0);
        CHECK(post_send(e, *q, 0, 4, 2) == 0);
    }
    check_both_fail(e, a, &b, std::chrono::seconds(8), "wrong dest QPN");
    destroy(a);
    destroy(b);
}

void check_unreachable(Env& e)
{
    // 127.0.0.1 port 1: nothing listens (refused, retried until the timeout,
    // or, as responder, no Request ever comes); 203.0.113.7 (TEST-NET-3):
    // no answer (MPA/connect timeout).
    const char* peers[] = {"::ffff:127.0.0.1", "::ffff:203.0.113.7"};
    for (const char* peer : peers) {
        Qp a = make_qp(e);
        ibv_gid dgid{};
        REQUIRE(inet_pton(AF_INET6, peer, dgid.raw) == 1);
        REQUIRE(rtr(a, dgid, (1u << 8) | 5) == 0);
        REQUIRE(rts(a) == 0);
        CHECK(post_recv(e, a, 0, 4, 1) == 0);
        CHECK(post_send(e, a, 0, 4, 2) == 0);
        check_both_fail(e, a, nullptr, std::chrono::seconds(8), peer);
        destroy(a);
    }
}

void check_many_qps(Env& e)
{
    constexpr int n = 300;
    std::vector<Qp> qps;
    std::set<uint32_t> ports;
    for (int i = 0; i < n; ++i) {
        qps.push_back(make_qp(e, 4));
        ports.insert(qps.back().qp->qp_num >> 8);
    }
    CHECK(ports.size() >= 2);  // 256 slots per endpoint port
    Qp& a = qps[n - 2];
    Qp& b = qps[n - 1];
    CHECK(post_recv(e, b, 4096, 4, 1) == 0);
    REQUIRE(rtr(a, e.gid, b.qp->qp_num) == 0 && rtr(b, e.gid, a.qp->qp_num) == 0);
    REQUIRE(rts(a) == 0 && rts(b) == 0);
    CHECK(post_send(e, a, 0, 4, 2) == 0);
    auto r = wait_wc(b, 1, std::chrono::seconds(5));
    CHECK(r.size() == 1 && r[0].status == IBV_WC_SUCCESS);
    const uint32_t qpn_a = a.qp->qp_num, qpn_b = b.qp->qp_num;  // destroy() frees the ibv_qp
    for (auto& q : qps) destroy(q);
    std::printf("%d QPs on %zu endpoint ports; QPNs 0x%06x and 0x%06x connected\n", n, ports.size(),
                qpn_a, qpn_b);
}

}  // namespace

int main()
{
    int num = 0;
    ibv_device** list = ibv_get_device_list(&num);
    REQUIRE(list && num > 0);
    Env e;
    e.ctx = ibv_open_device(list[0]);
    REQUIRE(e.ctx);
    e.pd = ibv_alloc_pd(e.ctx);
    REQUIRE(e.pd);
    e.mr = ibv_reg_mr(e.pd, e.buf.data(), e.buf.size(), IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE);
    REQUIRE(e.mr);
    REQUIRE(ibv_query_gid(e.ctx, 1, 0, &e.gid) == 0);

    check_post_before_connect(e);
    check_wrong_dest_qpn(e);
    check_unreachable(e);
    check_many_qps(e);

    ibv_dereg_mr(e.mr);
    ibv_dealloc_pd(e.pd);
    ibv_close_device(e.ctx);
    ibv_free_device_list(list);
    return iwemu::test::check_exit_status("oob_connect_test", nullptr);
}
