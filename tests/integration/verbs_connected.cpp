// Two RC QPs in one process, connected through librdmacm over loopback
// (both ends in this process, on separate event channels and contexts),
// then the data verbs through the iwemu provider: SEND/RECV with two SGEs,
// inline SEND, RDMA WRITE, RDMA READ, RDMA WRITE with immediate (RFC 7306),
// an unsignalled WR retired by a later signalled one, completions awaited
// through completion channels (polled, and slept on in ibv_get_cq_event by
// two threads in a ping-pong), and the WR fields (opcode, remote address,
// rkey, byte_len, wr_id, imm_data) checked end to end.  Then disconnect and
// destroy.  Every wait is bounded.
#include <arpa/inet.h>
#include <infiniband/verbs.h>
#include <poll.h>
#include <rdma/rdma_cma.h>
#include <signal.h>
#include <sys/time.h>

#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <thread>
#include <vector>

#include "check.h"
#include "cm_loopback.h"
#include "rc_qp_attr.h"

namespace {

using namespace iwemu::test;

constexpr int kTimeoutMs = kCmTimeoutMs;
constexpr size_t kBuf = 1 << 16;

struct Side {
    rdma_cm_id* id = nullptr;
    ibv_pd* pd = nullptr;
    ibv_comp_channel* ch = nullptr;
    ibv_cq* cq = nullptr;
    ibv_mr* mr = nullptr;
    std::vector<char> buf = std::vector<char>(kBuf);
};

void setup(Side& s, rdma_cm_id* id)
{
    s.id = id;
    REQUIRE(id->verbs);
    s.pd = ibv_alloc_pd(id->verbs);
    REQUIRE(s.pd);
    s.ch = ibv_create_comp_channel(id->verbs);
    REQUIRE(s.ch);
    s.cq = ibv_create_cq(id->verbs, 64, &s, s.ch, 0);
    REQUIRE(s.cq);
    CHECK(ibv_req_notify_cq(s.cq, 0) == 0);
    s.mr = ibv_reg_mr(s.pd, s.buf.data(), s.buf.size(),
                      IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ |
                          IBV_ACCESS_REMOTE_ATOMIC);
    REQUIRE(s.mr);
    ibv_qp_init_attr ia = iwemu::test::rc_qp_attr(s.cq, {16, 16, 2, 2, 64});
    REQUIRE(rdma_create_qp(id, s.pd, &ia) == 0);
    CHECK(ia.cap.max_inline_data >= 64);
}

// Next completion, waiting on the completion channel when the CQ is empty.
bool next_wc(Side& s, ibv_wc* wc)
{
    for (int rounds = 0; rounds < 3; ++rounds) {
        int n = ibv_poll_cq(s.cq, 1, wc);
        if (n < 0) return false;
        if (n == 1) return true;
        pollfd p{s.ch->fd, POLLIN, 0};
        if (poll(&p, 1, kTimeoutMs) != 1) break;
        ibv_cq* cq = nullptr;
        void* ctx = nullptr;
        if (ibv_get_cq_event(s.ch, &cq, &ctx) != 0) return false;
        CHECK(cq == s.cq && ctx == &s);
        ibv_ack_cq_events(cq, 1);
        CHECK(ibv_req_notify_cq(s.cq, 0) == 0);
    }
    int n = ibv_poll_cq(s.cq, 1, wc);
    if (n != 1) std::fprintf(stderr, "no completion within %d ms\n", kTimeoutMs);
    return n == 1;
}

void post_recv(Side& s, uint64_t wr_id, size_t offset, uint32_t len)
{
    ibv_sge sge[2] = {{reinterpret_cast<uintptr_t>(s.buf.data() + offset), len / 2, s.mr->lkey},
                      {reinterpret_cast<uintptr_t>(s.buf.data() + offset + len / 2), len - len / 2, s.mr->lkey}};
    ibv_recv_wr wr{};
    wr.wr_id = wr_id;
    wr.sg_list = sge;
    wr.num_sge = 2;
    ibv_recv_wr* bad = nullptr;
    CHECK(ibv_post_recv(s.id->qp, &wr, &bad) == 0);
}

int post_send(Side& s, uint64_t wr_id, ibv_wr_opcode op, size_t offset, uint32_t len, int flags,
              uint64_t remote = 0, uint32_t rkey = 0)
{
    ibv_sge sge{reinterpret_cast<uintptr_t>(s.buf.data() + offset), len, s.mr->lkey};
    ibv_send_wr wr{};
    wr.wr_id = wr_id;
    wr.opcode = op;
    wr.sg_list = &sge;
    wr.num_sge = 1;
    wr.send_flags = flags;
    wr.wr.rdma.remote_addr = remote;
    wr.wr.rdma.rkey = rkey;
    ibv_send_wr* bad = nullptr;
    return ibv_post_send(s.id->qp, &wr, &bad);
}

}  // namespace

int main()
{
    CmLoopback l = cm_loopback_resolved();
    rdma_event_channel* ech_s = l.ech_s;
    rdma_event_channel* ech_c = l.ech_c;
    rdma_cm_id* cid = l.client;
    Side c, s;
    setup(c, cid);
    post_recv(c, 1001, 0, 256);  // receives posted before the connection exists
    rdma_conn_param cp = cm_conn_param();

    // The connect; the passive side gets its QP before the accept.
    rdma_cm_id* sid = cm_loopback_connect(l, cp);
    setup(s, sid);
    post_recv(s, 2001, 0, 256);
    cm_loopback_accept(l, sid, cp);

    ibv_qp_attr qa{};
    ibv_qp_init_attr qi{};
    CHECK(ibv_query_qp(c.id->qp, &qa, IBV_QP_STATE, &qi) == 0 && qa.qp_state == IBV_QPS_RTS);

    // 1. SEND client -> server into a two-SGE receive.
    std::memset(c.buf.data() + 1024, 'S', 200);
    CHECK(post_send(c, 11, IBV_WR_SEND, 1024, 200, IBV_SEND_SIGNALED) == 0);
    ibv_wc wc{};
    CHECK(next_wc(c, &wc) && wc.wr_id == 11 && wc.status == IBV_WC_SUCCESS && wc.opcode == IBV_WC_SEND);
    CHECK(next_wc(s, &wc) && wc.wr_id == 2001 && wc.status == IBV_WC_SUCCESS && wc.opcode == IBV_WC_RECV &&
          wc.byte_len == 200 && wc.qp_num == s.id->qp->qp_num);
    CHECK(std::memcmp(s.buf.data(), c.buf.data() + 1024, 200) == 0);

    // 2. Inline SEND server -> client (the source may change right after posting).
    std::memset(s.buf.data() + 4096, 'I', 48);
    CHECK(post_send(s, 21, IBV_WR_SEND, 4096, 48, IBV_SEND_SIGNALED | IBV_SEND_INLINE) == 0);
    std::memset(s.buf.data() + 4096, 'x', 48);
    CHECK(next_wc(s, &wc) && wc.wr_id == 21 && wc.status == IBV_WC_SUCCESS);
    CHECK(next_wc(c, &wc) && wc.wr_id == 1001 && wc.byte_len == 48 && wc.status == IBV_WC_SUCCESS);
    CHECK(c.buf[0] == 'I' && c.buf[47] == 'I');

    // 3. RDMA WRITE client -> server (unsignalled), then a signalled one:
    //    completing the second retires the first.
    std::memset(c.buf.data() + 8192, 'W', 8192);
    const uint64_t s_base = reinterpret_cast<uintptr_t>(s.buf.data());
    CHECK(post_send(c, 31, IBV_WR_RDMA_WRITE, 8192, 4096, 0, s_base + 16384, s.mr->rkey) == 0);
    CHECK(post_send(c, 32, IBV_WR_RDMA_WRITE, 12288, 4096, IBV_SEND_SIGNALED, s_base + 20480, s.mr->rkey) == 0);
    CHECK(next_wc(c, &wc) && wc.wr_id == 32 && wc.status == IBV_WC_SUCCESS && wc.opcode == IBV_WC_RDMA_WRITE);
    // A local Write completion says nothing about remote placement; a Send
    // behind the Writes does (RDMAP delivers it after their placement).
    post_recv(s, 2002, 0, 256);
    CHECK(post_send(c, 33, IBV_WR_SEND, 1024, 8, IBV_SEND_SIGNALED) == 0);
    CHECK(next_wc(c, &wc) && wc.wr_id == 33 && wc.status == IBV_WC_SUCCESS);
    CHECK(next_wc(s, &wc) && wc.wr_id == 2002 && wc.status == IBV_WC_SUCCESS);
    CHECK(std::memcmp(s.buf.data() + 16384, c.buf.data() + 8192, 8192) == 0);

    // 4. RDMA READ: the client reads what it wrote back into another place.
    CHECK(post_send(c, 41, IBV_WR_RDMA_READ, 32768, 8192, IBV_SEND_SIGNALED, s_base + 16384, s.mr->rkey) == 0);
    CHECK(next_wc(c, &wc) && wc.wr_id == 41 && wc.status == IBV_WC_SUCCESS && wc.opcode == IBV_WC_RDMA_READ &&
          wc.byte_len == 8192);
    CHECK(std::memcmp(c.buf.data() + 32768, c.buf.data() + 8192, 8192) == 0);

    // 4b. RDMA WRITE with immediate (RFC 7306 Immediate Data): the data lands,
    //     one receive completes as RECV_RDMA_WITH_IMM with the __be32 value as
    //     posted and byte_len = the Write's length; the send side sees RDMA_WRITE.
    //     SEND with immediate has no RFC 7306 form: refused, nothing posted.
    {
        std::memset(c.buf.data() + 49152, 'M', 3000);
        post_recv(s, 2003, 0, 0);
        ibv_sge sge{reinterpret_cast<uintptr_t>(c.buf.data() + 49152), 3000, c.mr->lkey};
        ibv_send_wr wr{};
        wr.wr_id = 45;
        wr.opcode = IBV_WR_RDMA_WRITE_WITH_IMM;
        wr.sg_list = &sge;
        wr.num_sge = 1;
        wr.send_flags = IBV_SEND_SIGNALED;
        wr.imm_data = htonl(0xC0FFEE01);
        wr.wr.rdma.remote_addr = s_base + 49152;
        wr.wr.rdma.rkey = s.mr->rkey;
        ibv_send_wr* bad = nullptr;
        CHECK(ibv_post_send(c.id->qp, &wr, &bad) == 0);
        CHECK(next_wc(c, &wc) && wc.wr_id == 45 && wc.status == IBV_WC_SUCCESS && wc.opcode == IBV_WC_RDMA_WRITE);
        CHECK(next_wc(s, &wc) && wc.wr_id == 2003 && wc.status == IBV_WC_SUCCESS &&
              wc.opcode == IBV_WC_RECV_RDMA_WITH_IMM && (wc.wc_flags & IBV_WC_WITH_IMM) &&
              ntohl(wc.imm_data) == 0xC0FFEE01 && wc.byte_len == 3000);
        CHECK(std::memcmp(s.buf.data() + 49152, c.buf.data() + 49152, 3000) == 0);
        wr.opcode = IBV_WR_SEND_WITH_IMM;
        CHECK(ibv_post_send(c.id->qp, &wr, &bad) == EOPNOTSUPP && bad == &wr);
    }

    // 4c. RFC 7306 atomics through libibverbs' wr.atomic (rkey at its own
    //     offset), on a QP rdma_cm gave REMOTE_ATOMIC: the original value in
    //     host order in the 8 local octets, COMP_SWAP / FETCH_ADD, byte_len 8.
    {
        uint64_t word = 0x1122334455667788ull;
        std::memcpy(s.buf.data() + 57344, &word, 8);
        auto atomic = [&](uint64_t wr_id, ibv_wr_opcode op, size_t local, uint64_t compare_add, uint64_t swap) {
            ibv_sge sge{reinterpret_cast<uintptr_t>(c.buf.data() + local), 8, c.mr->lkey};
            ibv_send_wr wr{};
            wr.wr_id = wr_id;
            wr.opcode = op;
            wr.sg_list = &sge;
            wr.num_sge = 1;
            wr.send_flags = IBV_SEND_SIGNALED;
            wr.wr.atomic.remote_addr = s_base + 57344;
            wr.wr.atomic.rkey = s.mr->rkey;
            wr.wr.atomic.compare_add = compare_add;
            wr.wr.atomic.swap = swap;
            ibv_send_wr* bad = nullptr;
            return ibv_post_send(c.id->qp, &wr, &bad);
        };
        CHECK(atomic(46, IBV_WR_ATOMIC_FETCH_AND_ADD, 57344, 0x10, 0) == 0);
        CHECK(atomic(47, IBV_WR_ATOMIC_CMP_AND_SWP, 57352, 0x1122334455667798ull, 42) == 0);
        CHECK(next_wc(c, &wc) && wc.wr_id == 46 && wc.status == IBV_WC_SUCCESS && wc.opcode == IBV_WC_FETCH_ADD &&
              wc.byte_len == 8);
        CHECK(next_wc(c, &wc) && wc.wr_id == 47 && wc.status == IBV_WC_SUCCESS && wc.opcode == IBV_WC_COMP_SWAP &&
              wc.byte_len == 8);
        uint64_t got[2], now;
        std::memcpy(got, c.buf.data() + 57344, 16);
        std::memcpy(&now, s.buf.data() + 57344, 8);
        CHECK(got[0] == 0x1122334455667788ull && got[1] == 0x1122334455667798ull && now == 42);
        CHECK(atomic(48, IBV_WR_ATOMIC_FETCH_AND_ADD, 57344, 1, 0) == 0);  // still up
        CHECK(next_wc(c, &wc) && wc.wr_id == 48 && wc.status == IBV_WC_SUCCESS);
    }

    // 4d. Blocking waits: each side's thread sleeps in ibv_get_cq_event with
    //     nothing queued (the shim lets that thread receive itself,
    //     emulator/qp/rx_event_waiter.cpp) through a SEND ping-pong, while a
    //     SIGALRM handler installed with SA_RESTART fires every 2 ms: like
    //     read(), the wait restarts.
    {
        struct sigaction sa{};
        sa.sa_handler = [](int) {};
        sa.sa_flags = SA_RESTART;
        sigemptyset(&sa.sa_mask);
        CHECK(sigaction(SIGALRM, &sa, nullptr) == 0);
        itimerval tick{{0, 2000}, {0, 2000}};
        CHECK(setitimer(ITIMER_REAL, &tick, nullptr) == 0);
        // The next receive completion, sleeping in ibv_get_cq_event between polls.
        auto wait_recv = [](Side& x) {
            for (;;) {
                ibv_wc w{};
                int n = ibv_poll_cq(x.cq, 1, &w);
                if (n == 0) {
                    // Arm, then poll once more: a completion may have come before the arm.
                    if (ibv_req_notify_cq(x.cq, 0) != 0) return false;
                    n = ibv_poll_cq(x.cq, 1, &w);
                }
                if (n < 0) return false;
                if (n == 1) {
                    if (w.status != IBV_WC_SUCCESS) return false;
                    if (w.opcode == IBV_WC_RECV) return w.byte_len == 8;
                    continue;
                }
                ibv_cq* cq = nullptr;
                void* ctx = nullptr;
                if (ibv_get_cq_event(x.ch, &cq, &ctx) != 0 || cq != x.cq) return false;
                ibv_ack_cq_events(cq, 1);
            }
        };
        constexpr int rounds = 300;
        std::atomic<bool> done{false};
        std::thread watchdog([&] {
            for (int i = 0; i < 2000 && !done; ++i) poll(nullptr, 0, 10);
            if (!done) {
                std::fprintf(stderr, "blocking ping-pong stuck\n");
                std::_Exit(1);
            }
        });
        post_recv(s, 3000, 0, 8);
        post_recv(c, 3001, 0, 8);
        std::atomic<int> served{0};
        // No receive is left posted afterwards: step 5 expects none to flush.
        std::thread server([&] {
            for (int i = 0; i < rounds; ++i) {
                if (!wait_recv(s)) return;
                if (i + 1 < rounds) post_recv(s, 3000, 0, 8);
                if (post_send(s, 3100, IBV_WR_SEND, 1024, 8, IBV_SEND_SIGNALED) != 0) return;
                served.fetch_add(1);
            }
        });
        int answered = 0;
        for (int i = 0; i < rounds; ++i) {
            if (post_send(c, 3200, IBV_WR_SEND, 1024, 8, IBV_SEND_SIGNALED) != 0 || !wait_recv(c)) break;
            if (i + 1 < rounds) post_recv(c, 3001, 0, 8);
            ++answered;
        }
        server.join();
        done = true;
        watchdog.join();
        itimerval off{};
        CHECK(setitimer(ITIMER_REAL, &off, nullptr) == 0);
        // The handler stays: a SIGALRM raised before the timer stopped may
        // still be pending (valgrind delivers late), and the default action ends the process.
        CHECK(answered == rounds);
        CHECK(served.load() == rounds);
        // Whatever is left (the server's last SEND completion), and the CQs
        // armed again for next_wc.
        for (Side* x : {&c, &s}) {
            ibv_wc w{};
            while (ibv_poll_cq(x->cq, 1, &w) == 1) CHECK(w.status == IBV_WC_SUCCESS);
            CHECK(ibv_req_notify_cq(x->cq, 0) == 0);
        }
    }

    // 5. A WRITE with a wrong rkey: nothing is placed, the responder sends a
    //    Terminate and both QPs end in ERROR (the WRITE itself may already
    //    have completed locally: iWARP Writes are unacknowledged).  A later
    //    WR is flushed.
    std::memset(s.buf.data() + 40960, 0, 64);
    std::memset(c.buf.data(), 'B', 64);
    CHECK(post_send(c, 51, IBV_WR_RDMA_WRITE, 0, 64, IBV_SEND_SIGNALED, s_base + 40960, s.mr->rkey ^ 0x5a5a00) == 0);
    CHECK(next_wc(c, &wc) && wc.wr_id == 51);
    bool flushed = false;
    for (int i = 0; i < 50 && !flushed; ++i) {
        if (post_send(c, 52, IBV_WR_SEND, 0, 8, IBV_SEND_SIGNALED) != 0) break;
        flushed = next_wc(c, &wc) && wc.wr_id == 52 && wc.status != IBV_WC_SUCCESS;
        if (!flushed) poll(nullptr, 0, 20);
    }
    CHECK(flushed);
    CHECK(ibv_query_qp(c.id->qp, &qa, IBV_QP_STATE, &qi) == 0 && qa.qp_state == IBV_QPS_ERR);
    static const char zeros[64] = {};
    CHECK(std::memcmp(s.buf.data() + 40960, zeros, 64) == 0);
    // The responder's QP reports the protection fault as an async event on
    // its context, naming the ibv_qp.
    bool saw_qp_error = false;
    for (int i = 0; i < 8 && !saw_qp_error; ++i) {
        pollfd p{s.id->verbs->async_fd, POLLIN, 0};
        if (poll(&p, 1, kTimeoutMs) != 1) break;
        ibv_async_event ev{};
        if (ibv_get_async_event(s.id->verbs, &ev) != 0) break;
        const bool qp_event = ev.event_type == IBV_EVENT_QP_FATAL || ev.event_type == IBV_EVENT_QP_REQ_ERR ||
                              ev.event_type == IBV_EVENT_QP_ACCESS_ERR;
        if (qp_event) CHECK(ev.element.qp == s.id->qp || ev.element.qp == c.id->qp);
        saw_qp_error = qp_event && ev.element.qp == s.id->qp;
        ibv_ack_async_event(&ev);
    }
    CHECK(saw_qp_error);

    // Teardown.  The client's QP is in ERROR already: rdma_disconnect's
    // SQD step must not fail there.
    CHECK(rdma_disconnect(c.id) == 0);
    CHECK(expect_cm_event(ech_c, RDMA_CM_EVENT_DISCONNECTED) != nullptr);
    CHECK(expect_cm_event(ech_s, RDMA_CM_EVENT_DISCONNECTED) != nullptr);
    for (Side* side : {&c, &s}) {
        rdma_destroy_qp(side->id);
        CHECK(ibv_dereg_mr(side->mr) == 0);
        CHECK(ibv_destroy_cq(side->cq) == 0);
        CHECK(ibv_destroy_comp_channel(side->ch) == 0);
        CHECK(ibv_dealloc_pd(side->pd) == 0);
        CHECK(rdma_destroy_id(side->id) == 0);
    }
    cm_loopback_release(l);

    return iwemu::test::check_exit_status("verbs_connected", "all checks passed");
}
