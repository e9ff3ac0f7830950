// Extended CQs (ibv_create_cq_ex) on a connected RC pair through the iwemu
// provider: the attributes refused at creation, ENOENT from an empty CQ,
// every read_* accessor for Send, Receive, RDMA Write, RDMA Read, Write with
// Immediate and Send with Invalidate completions, their timestamps (device
// clock and wall clock), several completions in
// one start/next/end pass, the completion channel (ibv_req_notify_cq and
// ibv_get_cq_event on ibv_cq_ex_to_cq) and ibv_poll_cq on the same CQ.
// Every wait is bounded.
#include <arpa/inet.h>
#include <infiniband/verbs.h>
#include <poll.h>
#include <rdma/rdma_cma.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <vector>

#include "check.h"
#include "cm_loopback.h"

namespace {

using namespace iwemu::test;

constexpr int kTimeoutMs = kCmTimeoutMs;
constexpr size_t kBuf = 1 << 16;
constexpr uint64_t kWcFlags = IBV_WC_EX_WITH_BYTE_LEN | IBV_WC_EX_WITH_IMM | IBV_WC_EX_WITH_QP_NUM |
                              IBV_WC_EX_WITH_SRC_QP | IBV_WC_EX_WITH_SLID | IBV_WC_EX_WITH_SL |
                              IBV_WC_EX_WITH_DLID_PATH_BITS | IBV_WC_EX_WITH_COMPLETION_TIMESTAMP |
                              IBV_WC_EX_WITH_COMPLETION_TIMESTAMP_WALLCLOCK;

struct Side {
    rdma_cm_id* id = nullptr;
    ibv_pd* pd = nullptr;
    ibv_comp_channel* ch = nullptr;
    ibv_cq_ex* cq = nullptr;
    ibv_mr* mr = nullptr;
    std::vector<char> buf = std::vector<char>(kBuf);
    uint64_t last_ts = 0;  // completion timestamps never go back
};

// The attributes an extended CQ refuses, on a context before any QP exists.
void check_refusals(ibv_context* ctx)
{
    ibv_cq_init_attr_ex a{};
    a.cqe = 8;
    a.wc_flags = IBV_WC_EX_WITH_CVLAN;
    errno = 0;
    CHECK(ibv_create_cq_ex(ctx, &a) == nullptr && errno == EOPNOTSUPP);
    a.wc_flags = kWcFlags;
    a.comp_mask = 1u << 7;  // no such attribute
    errno = 0;
    CHECK(ibv_create_cq_ex(ctx, &a) == nullptr && errno == EINVAL);
    a.comp_mask = IBV_CQ_INIT_ATTR_MASK_FLAGS;
    a.flags = IBV_CREATE_CQ_ATTR_IGNORE_OVERRUN;
    errno = 0;
    CHECK(ibv_create_cq_ex(ctx, &a) == nullptr && errno == EOPNOTSUPP);
    a.flags = IBV_CREATE_CQ_ATTR_SINGLE_THREADED;  // a hint: accepted
    ibv_cq_ex* cq = ibv_create_cq_ex(ctx, &a);
    CHECK(cq != nullptr);
    if (cq) {
        ibv_poll_cq_attr pa{};
        CHECK(ibv_start_poll(cq, &pa) == ENOENT);  // empty; no end_poll after ENOENT
        ibv_wc wc{};
        CHECK(ibv_poll_cq(ibv_cq_ex_to_cq(cq), 1, &wc) == 0);
        CHECK(ibv_destroy_cq(ibv_cq_ex_to_cq(cq)) == 0);
    }
}

void setup(Side& s, rdma_cm_id* id)
{
    s.id = id;
    s.pd = ibv_alloc_pd(id->verbs);
    REQUIRE(s.pd);
    s.ch = ibv_create_comp_channel(id->verbs);
    REQUIRE(s.ch);
    ibv_cq_init_attr_ex a{};
    a.cqe = 64;
    a.cq_context = &s;
    a.channel = s.ch;
    a.wc_flags = kWcFlags;
    s.cq = ibv_create_cq_ex(id->verbs, &a);
    REQUIRE(s.cq);
    CHECK(ibv_cq_ex_to_cq(s.cq)->cqe >= 64);
    s.mr = ibv_reg_mr(s.pd, s.buf.data(), s.buf.size(),
                      IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ);
    REQUIRE(s.mr);
    ibv_qp_init_attr ia{};
    ia.send_cq = ibv_cq_ex_to_cq(s.cq);
    ia.recv_cq = ibv_cq_ex_to_cq(s.cq);
    ia.qp_type = IBV_QPT_RC;
    ia.cap = {16, 16, 2, 2, 64};
    REQUIRE(rdma_create_qp(id, s.pd, &ia) == 0);
}

// One completion as the extended CQ reports it.
struct Entry {
    uint64_t wr_id;
    ibv_wc_status status;
    ibv_wc_opcode opcode;
    uint32_t vendor_err, byte_len, qp_num, src_qp, slid, inv_rkey;
    __be32 imm;
    unsigned int flags;
    uint8_t sl, path_bits;
    uint64_t ts, wallclock_ns;
};

Entry read_entry(ibv_cq_ex* cq)
{
    Entry e{};
    e.wr_id = cq->wr_id;
    e.status = cq->status;
    e.opcode = ibv_wc_read_opcode(cq);
    e.vendor_err = ibv_wc_read_vendor_err(cq);
    e.byte_len = ibv_wc_read_byte_len(cq);
    e.qp_num = ibv_wc_read_qp_num(cq);
    e.src_qp = ibv_wc_read_src_qp(cq);
    e.flags = ibv_wc_read_wc_flags(cq);
    if (e.flags & IBV_WC_WITH_IMM) e.imm = ibv_wc_read_imm_data(cq);
    if (e.flags & IBV_WC_WITH_INV) e.inv_rkey = ibv_wc_read_invalidated_rkey(cq);
    e.slid = ibv_wc_read_slid(cq);
    e.sl = ibv_wc_read_sl(cq);
    e.path_bits = ibv_wc_read_dlid_path_bits(cq);
    e.ts = ibv_wc_read_completion_ts(cq);
    e.wallclock_ns = ibv_wc_read_completion_wallclock_ns(cq);
    return e;
}

// Next completion, sleeping on the completion channel while the CQ is empty
// (arm, then poll once more: a completion before the arm raises no event).
bool next(Side& s, Entry* e)
{
    ibv_poll_cq_attr pa{};
    for (int rounds = 0; rounds < 3; ++rounds) {
        int rc = ibv_start_poll(s.cq, &pa);
        if (rc == 0) {
            *e = read_entry(s.cq);
            ibv_end_poll(s.cq);
            CHECK(e->ts >= s.last_ts);
            s.last_ts = e->ts;
            return true;
        }
        if (rc != ENOENT) return false;
        if (ibv_req_notify_cq(ibv_cq_ex_to_cq(s.cq), 0) != 0) return false;
        rc = ibv_start_poll(s.cq, &pa);
        if (rc == 0) {
            *e = read_entry(s.cq);
            ibv_end_poll(s.cq);
            return true;
        }
        pollfd p{s.ch->fd, POLLIN, 0};
        if (poll(&p, 1, kTimeoutMs) != 1) break;
        ibv_cq* cq = nullptr;
        void* ctx = nullptr;
        if (ibv_get_cq_event(s.ch, &cq, &ctx) != 0) return false;
        CHECK(cq == ibv_cq_ex_to_cq(s.cq) && ctx == &s);
        ibv_ack_cq_events(cq, 1);
    }
    std::fprintf(stderr, "no completion within %d ms\n", kTimeoutMs);
    return false;
}

void post_recv(Side& s, uint64_t wr_id, size_t offset, uint32_t len)
{
    ibv_sge sge{reinterpret_cast<uintptr_t>(s.buf.data() + offset), len, s.mr->lkey};
    ibv_recv_wr wr{};
    wr.wr_id = wr_id;
    wr.sg_list = &sge;
    wr.num_sge = 1;
    ibv_recv_wr* bad = nullptr;
    CHECK(ibv_post_recv(s.id->qp, &wr, &bad) == 0);
}

int post_send(Side& s, uint64_t wr_id, ibv_wr_opcode op, size_t offset, uint32_t len, uint64_t remote = 0,
              uint32_t rkey = 0, uint32_t imm_or_inv = 0)
{
    ibv_sge sge{reinterpret_cast<uintptr_t>(s.buf.data() + offset), len, s.mr->lkey};
    ibv_send_wr wr{};
    wr.wr_id = wr_id;
    wr.opcode = op;
    wr.sg_list = &sge;
    wr.num_sge = 1;
    wr.send_flags = IBV_SEND_SIGNALED;
    wr.wr.rdma.remote_addr = remote;
    wr.wr.rdma.rkey = rkey;
    if (op == IBV_WR_SEND_WITH_INV)
        wr.invalidate_rkey = imm_or_inv;
    else
        wr.imm_data = htonl(imm_or_inv);
    ibv_send_wr* bad = nullptr;
    return ibv_post_send(s.id->qp, &wr, &bad);
}

// The wall clock of a completion just taken: within a minute of now.
bool recent(uint64_t wallclock_ns)
{
    timespec now{};
    clock_gettime(CLOCK_REALTIME, &now);
    const int64_t age = static_cast<int64_t>(now.tv_sec) * 1000000000 + now.tv_nsec - static_cast<int64_t>(wallclock_ns);
    return age >= 0 && age < 60 * int64_t{1000000000};
}

bool ok_local(const Entry& e, uint64_t wr_id, ibv_wc_opcode op, uint32_t qp_num)
{
    const bool ok = e.wr_id == wr_id && e.status == IBV_WC_SUCCESS && e.opcode == op && e.qp_num == qp_num &&
                    e.vendor_err == 0 && e.slid == 0 && e.sl == 0 && e.path_bits == 0 && e.ts != 0 &&
                    recent(e.wallclock_ns);
    if (!ok)
        std::fprintf(stderr, "wr_id %llu status %d opcode %d qp %u (wanted %llu, %d, %u)\n",
                     static_cast<unsigned long long>(e.wr_id), e.status, e.opcode, e.qp_num,
                     static_cast<unsigned long long>(wr_id), op, qp_num);
    return ok;
}

}  // namespace

int main()
{
    CmLoopback l = cm_loopback_resolved();
    rdma_event_channel* ech_s = l.ech_s;
    rdma_event_channel* ech_c = l.ech_c;
    rdma_cm_id* cid = l.client;
    Side c, s;
    REQUIRE(cid->verbs);
    check_refusals(cid->verbs);
    setup(c, cid);
    rdma_conn_param cp = cm_conn_param();
    rdma_cm_id* sid = cm_loopback_connect(l, cp);
    setup(s, sid);
    for (int i = 0; i < 4; ++i) post_recv(s, 2001 + i, 1024 * i, 1024);
    cm_loopback_accept(l, sid, cp);
    const uint32_t cq_num = c.id->qp->qp_num, sq_num = s.id->qp->qp_num;
    const uint64_t s_base = reinterpret_cast<uintptr_t>(s.buf.data());
    Entry e{};

    // Send: the sender's and the receiver's view.
    std::memset(c.buf.data() + 8192, 'S', 300);
    CHECK(post_send(c, 11, IBV_WR_SEND, 8192, 300) == 0);
    CHECK(next(c, &e) && ok_local(e, 11, IBV_WC_SEND, cq_num) && !(e.flags & (IBV_WC_WITH_IMM | IBV_WC_WITH_INV)));
    CHECK(next(s, &e) && ok_local(e, 2001, IBV_WC_RECV, sq_num) && e.byte_len == 300 && e.flags == 0);
    CHECK(std::memcmp(s.buf.data(), c.buf.data() + 8192, 300) == 0);

    // RDMA Write with Immediate: the immediate comes back through read_imm_data.
    std::memset(c.buf.data() + 12288, 'W', 500);
    CHECK(post_send(c, 12, IBV_WR_RDMA_WRITE_WITH_IMM, 12288, 500, s_base + 16384, s.mr->rkey, 0xA1B2C3D4) == 0);
    CHECK(next(c, &e) && ok_local(e, 12, IBV_WC_RDMA_WRITE, cq_num));
    CHECK(next(s, &e) && ok_local(e, 2002, IBV_WC_RECV_RDMA_WITH_IMM, sq_num) && (e.flags & IBV_WC_WITH_IMM) &&
          ntohl(e.imm) == 0xA1B2C3D4 && e.byte_len == 500);
    CHECK(std::memcmp(s.buf.data() + 16384, c.buf.data() + 12288, 500) == 0);

    // RDMA Read: byte_len on the requester.
    std::memset(s.buf.data() + 20480, 'R', 700);
    CHECK(post_send(c, 13, IBV_WR_RDMA_READ, 24576, 700, s_base + 20480, s.mr->rkey) == 0);
    CHECK(next(c, &e) && ok_local(e, 13, IBV_WC_RDMA_READ, cq_num) && e.byte_len == 700);
    CHECK(std::memcmp(c.buf.data() + 24576, s.buf.data() + 20480, 700) == 0);

    // Send with Invalidate: the receiver reads the STag it lost.
    std::vector<char> victim(4096);
    ibv_mr* vmr = ibv_reg_mr(s.pd, victim.data(), victim.size(), IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE);
    REQUIRE(vmr);
    CHECK(post_send(c, 14, IBV_WR_SEND_WITH_INV, 8192, 64, 0, 0, vmr->rkey) == 0);
    CHECK(next(c, &e) && ok_local(e, 14, IBV_WC_SEND, cq_num));
    CHECK(next(s, &e) && ok_local(e, 2003, IBV_WC_RECV, sq_num) && (e.flags & IBV_WC_WITH_INV) &&
          e.inv_rkey == vmr->rkey && e.byte_len == 64);

    // Three completions in one pass: start, next, next, then ENOENT.
    for (uint64_t id = 21; id <= 23; ++id)
        CHECK(post_send(c, id, IBV_WR_RDMA_WRITE, 32768, 128, s_base + 32768, s.mr->rkey) == 0);
    ibv_poll_cq_attr pa{};
    int got = 0;
    for (int tries = 0; got < 3 && tries < 5000; ++tries) {
        if (ibv_start_poll(c.cq, &pa) != 0) {
            poll(nullptr, 0, 1);
            continue;
        }
        do {
            e = read_entry(c.cq);
            CHECK(ok_local(e, 21 + got, IBV_WC_RDMA_WRITE, cq_num));
            ++got;
        } while (ibv_next_poll(c.cq) == 0);
        ibv_end_poll(c.cq);
    }
    CHECK(got == 3);
    CHECK(ibv_start_poll(c.cq, &pa) == ENOENT);

    // ibv_poll_cq on the same CQ.
    CHECK(post_send(c, 31, IBV_WR_SEND, 8192, 40) == 0);
    ibv_wc wc{};
    int n = 0;
    for (int tries = 0; n == 0 && tries < 5000; ++tries) {
        n = ibv_poll_cq(ibv_cq_ex_to_cq(c.cq), 1, &wc);
        if (n == 0) poll(nullptr, 0, 1);
    }
    CHECK(n == 1 && wc.wr_id == 31 && wc.status == IBV_WC_SUCCESS && wc.opcode == IBV_WC_SEND);
    CHECK(next(s, &e) && ok_local(e, 2004, IBV_WC_RECV, sq_num) && e.byte_len == 40);

    rdma_disconnect(cid);
    expect_cm_event(ech_c, RDMA_CM_EVENT_DISCONNECTED);
    expect_cm_event(ech_s, RDMA_CM_EVENT_DISCONNECTED);
    for (Side* x : {&c, &s}) {
        rdma_destroy_qp(x->id);
        CHECK(ibv_destroy_cq(ibv_cq_ex_to_cq(x->cq)) == 0);
        CHECK(ibv_destroy_comp_channel(x->ch) == 0);
    }
    CHECK(ibv_dereg_mr(vmr) == 0);
    for (Side* x : {&c, &s}) {
        CHECK(ibv_dereg_mr(x->mr) == 0);
        CHECK(ibv_dealloc_pd(x->pd) == 0);
    }
    rdma_destroy_id(sid);
    rdma_destroy_id(cid);
    cm_loopback_release(l);
    return iwemu::test::check_exit_status("verbs_cq_ex", "all checks passed");
}
