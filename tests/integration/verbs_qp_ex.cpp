// The extended QP post API (ibv_create_qp_ex with send_ops_flags, ibv_wr_*)
// through the distro's libibverbs and librdmacm (rdma_create_qp_ex) on a
// connected RC pair in one process: what creation refuses, every builder
// and setter the device offers, wr_id / wr_flags (signaled, solicited,
// fence, inline), batches posted whole at ibv_wr_complete, and the errors:
// more WRs than max_send_wr (ENOMEM), more SGEs than max_send_sge, inline
// data beyond max_inline_data or on a Read (EINVAL), a builder the QP was
// not created with (EOPNOTSUPP), a batch the emulator refuses half way and
// ibv_wr_abort -- each posting nothing at all, which the receiver's next
// receive WR proves.  Two threads share one QP's critical region.  Atomics
// and memory windows run when the device reports them; otherwise creation
// must refuse them.  Every wait is bounded.
#include <arpa/inet.h>
#include <infiniband/verbs.h>
#include <poll.h>
#include <rdma/rdma_cma.h>

#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <set>
#include <thread>
#include <vector>

#include "check.h"
#include "cm_loopback.h"

namespace {

using namespace iwemu::test;

constexpr int kTimeoutMs = kCmTimeoutMs;
constexpr size_t kBuf = 1 << 18;
constexpr uint32_t kRecvs = 96;     // server receive WRs, 1 KiB each from offset 0
constexpr size_t kRecvArea = kRecvs * 1024;
constexpr uint32_t kSendWr = 16;
constexpr uint32_t kSendSge = 4;
constexpr uint64_t kBaseOps = IBV_QP_EX_WITH_SEND | IBV_QP_EX_WITH_SEND_WITH_INV | IBV_QP_EX_WITH_RDMA_WRITE |
                              IBV_QP_EX_WITH_RDMA_WRITE_WITH_IMM | IBV_QP_EX_WITH_RDMA_READ |
                              IBV_QP_EX_WITH_LOCAL_INV;

struct Side {
    rdma_cm_id* id = nullptr;
    ibv_pd* pd = nullptr;
    ibv_comp_channel* ch = nullptr;
    ibv_cq* cq = nullptr;
    ibv_mr* mr = nullptr;
    ibv_qp_ex* qpx = nullptr;
    ibv_qp_cap cap{};
    std::vector<char> buf = std::vector<char>(kBuf);
    char* at(size_t off) { return buf.data() + off; }
    uint64_t addr(size_t off) const { return reinterpret_cast<uintptr_t>(buf.data() + off); }
};

bool poll_one(ibv_cq* cq, ibv_wc* wc, int timeout_ms = kTimeoutMs)
{
    for (int waited = 0; waited <= timeout_ms; ++waited) {
        int n = ibv_poll_cq(cq, 1, wc);
        if (n == 1) return true;
        if (n < 0) return false;
        poll(nullptr, 0, 1);
    }
    return false;
}

// Nothing completes on cq within ms.
bool quiet(ibv_cq* cq, int ms)
{
    ibv_wc wc{};
    if (!poll_one(cq, &wc, ms)) return true;
    std::fprintf(stderr, "unexpected completion wr_id %llu status %d opcode %d\n",
                 static_cast<unsigned long long>(wc.wr_id), wc.status, wc.opcode);
    return false;
}

bool completed(ibv_cq* cq, uint64_t wr_id, ibv_wc_opcode op, ibv_wc* out = nullptr)
{
    ibv_wc wc{};
    if (!poll_one(cq, &wc)) {
        std::fprintf(stderr, "no completion for wr_id %llu\n", static_cast<unsigned long long>(wr_id));
        return false;
    }
    if (out) *out = wc;
    const bool ok = wc.wr_id == wr_id && wc.status == IBV_WC_SUCCESS && wc.opcode == op;
    if (!ok)
        std::fprintf(stderr, "completion wr_id %llu status %d (%s) opcode %d; wanted wr_id %llu opcode %d\n",
                     static_cast<unsigned long long>(wc.wr_id), wc.status, ibv_wc_status_str(wc.status), wc.opcode,
                     static_cast<unsigned long long>(wr_id), op);
    return ok;
}

// The server's receive WRs are consumed in order: wr_id 1000 + n for the
// n-th message it gets.  A batch that posted nothing leaves `next` alone.
struct Receiver {
    Side* s;
    uint32_t next = 0;
    bool expect(ibv_wc_opcode op, uint32_t len, ibv_wc* out = nullptr)
    {
        ibv_wc wc{};
        const bool ok = completed(s->cq, 1000 + next, op, &wc) && wc.byte_len == len;
        if (!ok) std::fprintf(stderr, "receive %u: byte_len %u, wanted %u\n", next, wc.byte_len, len);
        if (out) *out = wc;
        ++next;
        return ok;
    }
    char* data(uint32_t n) { return s->at(n * 1024); }
};

// One signaled Send of len octets from the client's offset 0x30000, and its
// arrival as the server's next receive: the probe after a refused batch.
bool probe(Side& c, Receiver& r, uint64_t wr_id, uint32_t len = 32)
{
    std::memset(c.at(0x30000), static_cast<int>(wr_id & 0x7f), len);
    ibv_wr_start(c.qpx);
    c.qpx->wr_id = wr_id;
    c.qpx->wr_flags = IBV_SEND_SIGNALED;
    ibv_wr_send(c.qpx);
    ibv_wr_set_sge(c.qpx, c.mr->lkey, c.addr(0x30000), len);
    if (ibv_wr_complete(c.qpx) != 0) return false;
    const uint32_t n = r.next;
    return completed(c.cq, wr_id, IBV_WC_SEND) && r.expect(IBV_WC_RECV, len) &&
           std::memcmp(r.data(n), c.at(0x30000), len) == 0;
}

ibv_qp_init_attr_ex qp_attr(ibv_pd* pd, ibv_cq* cq, uint64_t ops)
{
    ibv_qp_init_attr_ex a{};
    a.qp_type = IBV_QPT_RC;
    a.send_cq = cq;
    a.recv_cq = cq;
    a.cap = {kSendWr, kRecvs, kSendSge, 1, 64};
    a.comp_mask = IBV_QP_INIT_ATTR_PD | IBV_QP_INIT_ATTR_SEND_OPS_FLAGS;
    a.pd = pd;
    a.send_ops_flags = ops;
    return a;
}

// What creation refuses, and ibv_qp_to_qp_ex on what it accepts.
void check_create(ibv_context* ctx, const ibv_device_attr& dev)
{
    ibv_pd* pd = ibv_alloc_pd(ctx);
    ibv_cq* cq = ibv_create_cq(ctx, 8, nullptr, nullptr, 0);
    REQUIRE(pd && cq);
    auto refused = [&](ibv_qp_init_attr_ex a, int err, const char* what) {
        errno = 0;
        ibv_qp* qp = ibv_create_qp_ex(ctx, &a);
        const bool ok = !qp && errno == err;
        if (!ok) std::fprintf(stderr, "create_qp_ex %s: %p errno %d, wanted %d\n", what, (void*)qp, errno, err);
        CHECK(ok);
        if (qp) ibv_destroy_qp(qp);
    };
    ibv_qp_init_attr_ex a = qp_attr(pd, cq, IBV_QP_EX_WITH_SEND_WITH_IMM);
    refused(a, EOPNOTSUPP, "send with immediate");  // no RFC 7306 form
    a.send_ops_flags = IBV_QP_EX_WITH_SEND | IBV_QP_EX_WITH_TSO;
    refused(a, EOPNOTSUPP, "TSO");
    a.send_ops_flags = IBV_QP_EX_WITH_ATOMIC_WRITE;
    refused(a, EOPNOTSUPP, "atomic write");
    a.send_ops_flags = 1ull << 40;
    refused(a, EOPNOTSUPP, "unknown operation");
    if (dev.atomic_cap == IBV_ATOMIC_NONE) {
        a.send_ops_flags = IBV_QP_EX_WITH_SEND | IBV_QP_EX_WITH_ATOMIC_CMP_AND_SWP;
        refused(a, EOPNOTSUPP, "compare and swap");
        a.send_ops_flags = IBV_QP_EX_WITH_ATOMIC_FETCH_AND_ADD;
        refused(a, EOPNOTSUPP, "fetch and add");
    }
    if (dev.max_mw == 0) {
        a.send_ops_flags = IBV_QP_EX_WITH_BIND_MW;
        refused(a, EOPNOTSUPP, "bind mw");
    }
    a = qp_attr(pd, cq, IBV_QP_EX_WITH_SEND);
    a.comp_mask |= IBV_QP_INIT_ATTR_CREATE_FLAGS;
    a.create_flags = IBV_QP_CREATE_SCATTER_FCS;
    refused(a, EOPNOTSUPP, "create flags");
    a = qp_attr(pd, cq, IBV_QP_EX_WITH_SEND);
    a.comp_mask |= IBV_QP_INIT_ATTR_MAX_TSO_HEADER;
    refused(a, EOPNOTSUPP, "TSO header");
    a = qp_attr(pd, cq, IBV_QP_EX_WITH_SEND);
    a.qp_type = IBV_QPT_UD;
    refused(a, EOPNOTSUPP, "UD");

    // Accepted: create flags 0, every operation of kBaseOps; the caps come back.
    a = qp_attr(pd, cq, kBaseOps);
    a.comp_mask |= IBV_QP_INIT_ATTR_CREATE_FLAGS;
    a.create_flags = 0;
    ibv_qp* qp = ibv_create_qp_ex(ctx, &a);
    CHECK(qp != nullptr);
    if (qp) {
        ibv_qp_ex* x = ibv_qp_to_qp_ex(qp);
        CHECK(x != nullptr && reinterpret_cast<void*>(x) == reinterpret_cast<void*>(qp));
        CHECK(a.cap.max_send_wr >= kSendWr && a.cap.max_send_sge >= kSendSge && a.cap.max_inline_data >= 64);
        CHECK(x && x->wr_start && x->wr_complete && x->wr_abort && x->wr_send && x->wr_set_sge &&
              x->wr_set_ud_addr && x->wr_set_xrc_srqn && x->wr_send_tso);
        CHECK(ibv_destroy_qp(qp) == 0);
    }
    // Without send_ops_flags: no ibv_qp_ex.
    a = qp_attr(pd, cq, 0);
    a.comp_mask = IBV_QP_INIT_ATTR_PD;
    qp = ibv_create_qp_ex(ctx, &a);
    CHECK(qp != nullptr);
    if (qp) {
        CHECK(ibv_qp_to_qp_ex(qp) == nullptr);
        CHECK(ibv_destroy_qp(qp) == 0);
    }
    CHECK(ibv_destroy_cq(cq) == 0);
    CHECK(ibv_dealloc_pd(pd) == 0);
}

// A batch needs room for all of it: on a QP in INIT (its WRs wait for RTS)
// with 10 of 16 slots taken, a batch of 10 is refused whole, 6 fit.
void check_room(ibv_context* ctx)
{
    ibv_pd* pd = ibv_alloc_pd(ctx);
    ibv_cq* cq = ibv_create_cq(ctx, 64, nullptr, nullptr, 0);
    REQUIRE(pd && cq);
    ibv_qp_init_attr_ex a = qp_attr(pd, cq, IBV_QP_EX_WITH_SEND);
    ibv_qp* qp = ibv_create_qp_ex(ctx, &a);
    REQUIRE(qp);
    REQUIRE(a.cap.max_send_wr == kSendWr);
    ibv_qp_attr init{};
    init.qp_state = IBV_QPS_INIT;
    init.port_num = 1;
    CHECK(ibv_modify_qp(qp, &init, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS) == 0);
    ibv_send_wr wr{};
    wr.opcode = IBV_WR_SEND;
    ibv_send_wr* bad = nullptr;
    for (int i = 0; i < 10; ++i) CHECK(ibv_post_send(qp, &wr, &bad) == 0);
    ibv_qp_ex* x = ibv_qp_to_qp_ex(qp);
    auto batch = [x](int n) {
        ibv_wr_start(x);
        for (int i = 0; i < n; ++i) ibv_wr_send(x);
        return ibv_wr_complete(x);
    };
    CHECK(batch(10) == ENOMEM);
    CHECK(batch(6) == 0);  // had the refused batch posted a part, these would not fit
    CHECK(batch(1) == ENOMEM);
    CHECK(quiet(cq, 50));
    CHECK(ibv_destroy_qp(qp) == 0);
    CHECK(ibv_destroy_cq(cq) == 0);
    CHECK(ibv_dealloc_pd(pd) == 0);
}

void setup(Side& s, rdma_cm_id* id, uint64_t ops, int access)
{
    s.id = id;
    s.pd = ibv_alloc_pd(id->verbs);
    REQUIRE(s.pd);
    s.ch = ibv_create_comp_channel(id->verbs);
    REQUIRE(s.ch);
    s.cq = ibv_create_cq(id->verbs, 1024, &s, s.ch, 0);
    REQUIRE(s.cq);
    s.mr = ibv_reg_mr(s.pd, s.buf.data(), s.buf.size(), access);
    REQUIRE(s.mr);
    ibv_qp_init_attr_ex a = qp_attr(s.pd, s.cq, ops);
    REQUIRE(rdma_create_qp_ex(id, &a) == 0);
    s.cap = a.cap;
    s.qpx = ibv_qp_to_qp_ex(id->qp);
    REQUIRE(s.qpx);
}

void post_recvs(Side& s)
{
    for (uint32_t i = 0; i < kRecvs; ++i) {
        ibv_sge sge{s.addr(i * 1024), 1024, s.mr->lkey};
        ibv_recv_wr wr{};
        wr.wr_id = 1000 + i;
        wr.sg_list = &sge;
        wr.num_sge = 1;
        ibv_recv_wr* bad = nullptr;
        CHECK(ibv_post_recv(s.id->qp, &wr, &bad) == 0);
    }
}

// Every builder and setter on the connected pair.
void check_operations(Side& c, Side& s, Receiver& r)
{
    ibv_qp_ex* x = c.qpx;
    const uint64_t s_base = s.addr(0);
    ibv_wc wc{};

    // Send, signaled: wr_id comes back.
    CHECK(probe(c, r, 1, 300));

    // Unsignaled then signaled: one completion, both arrive.
    ibv_wr_start(x);
    x->wr_id = 2;
    x->wr_flags = 0;
    ibv_wr_send(x);
    ibv_wr_set_sge(x, c.mr->lkey, c.addr(0x30000), 16);
    x->wr_id = 3;
    x->wr_flags = IBV_SEND_SIGNALED;
    ibv_wr_send(x);
    ibv_wr_set_sge(x, c.mr->lkey, c.addr(0x30000), 17);
    CHECK(ibv_wr_complete(x) == 0);
    CHECK(completed(c.cq, 3, IBV_WC_SEND));
    CHECK(r.expect(IBV_WC_RECV, 16) && r.expect(IBV_WC_RECV, 17));
    CHECK(quiet(c.cq, 20));

    // A batch of 8 RDMA Writes and a Send behind them: completions in order;
    // the Send's arrival says the Writes were placed.
    for (int i = 0; i < 8; ++i) std::memset(c.at(0x20000 + i * 512), 'a' + i, 512);
    ibv_wr_start(x);
    x->wr_flags = IBV_SEND_SIGNALED;
    for (int i = 0; i < 8; ++i) {
        x->wr_id = 10 + i;
        ibv_wr_rdma_write(x, s.mr->rkey, s_base + kRecvArea + i * 512);
        ibv_wr_set_sge(x, c.mr->lkey, c.addr(0x20000 + i * 512), 512);
    }
    x->wr_id = 18;
    ibv_wr_send(x);
    ibv_wr_set_sge(x, c.mr->lkey, c.addr(0x30000), 8);
    CHECK(ibv_wr_complete(x) == 0);
    for (int i = 0; i < 8; ++i) CHECK(completed(c.cq, 10 + i, IBV_WC_RDMA_WRITE));
    CHECK(completed(c.cq, 18, IBV_WC_SEND));
    CHECK(r.expect(IBV_WC_RECV, 8));
    CHECK(std::memcmp(s.at(kRecvArea), c.at(0x20000), 8 * 512) == 0);

    // RDMA Write from an SGE list (three pieces, the list reused at once).
    ibv_sge list[3] = {{c.addr(0x20000 + 3 * 512), 100, c.mr->lkey},
                       {c.addr(0x20000 + 5 * 512), 200, c.mr->lkey},
                       {c.addr(0x20000 + 7 * 512), 300, c.mr->lkey}};
    ibv_wr_start(x);
    x->wr_id = 20;
    x->wr_flags = IBV_SEND_SIGNALED;
    ibv_wr_rdma_write(x, s.mr->rkey, s_base + kRecvArea + 8192);
    ibv_wr_set_sge_list(x, 3, list);
    std::memset(list, 0, sizeof list);  // copied by the setter
    x->wr_id = 21;
    ibv_wr_send(x);
    CHECK(ibv_wr_complete(x) == 0);
    CHECK(completed(c.cq, 20, IBV_WC_RDMA_WRITE) && completed(c.cq, 21, IBV_WC_SEND));
    CHECK(r.expect(IBV_WC_RECV, 0));
    CHECK(std::memcmp(s.at(kRecvArea + 8192), c.at(0x20000 + 3 * 512), 100) == 0 &&
          std::memcmp(s.at(kRecvArea + 8292), c.at(0x20000 + 5 * 512), 200) == 0 &&
          std::memcmp(s.at(kRecvArea + 8492), c.at(0x20000 + 7 * 512), 300) == 0);

    // RDMA Write with Immediate.
    ibv_wr_start(x);
    x->wr_id = 30;
    ibv_wr_rdma_write_imm(x, s.mr->rkey, s_base + kRecvArea + 16384, htonl(0xA1B2C3D4));
    ibv_wr_set_sge(x, c.mr->lkey, c.addr(0x20000), 64);
    CHECK(ibv_wr_complete(x) == 0);
    CHECK(completed(c.cq, 30, IBV_WC_RDMA_WRITE));
    CHECK(r.expect(IBV_WC_RECV_RDMA_WITH_IMM, 64, &wc) && (wc.wc_flags & IBV_WC_WITH_IMM) &&
          ntohl(wc.imm_data) == 0xA1B2C3D4);
    CHECK(std::memcmp(s.at(kRecvArea + 16384), c.at(0x20000), 64) == 0);

    // RDMA Read.
    std::memset(s.at(kRecvArea + 20000), 'R', 700);
    ibv_wr_start(x);
    x->wr_id = 40;
    ibv_wr_rdma_read(x, s.mr->rkey, s_base + kRecvArea + 20000);
    ibv_wr_set_sge(x, c.mr->lkey, c.addr(0x28000), 700);
    CHECK(ibv_wr_complete(x) == 0);
    CHECK(completed(c.cq, 40, IBV_WC_RDMA_READ, &wc) && wc.byte_len == 700);
    CHECK(std::memcmp(c.at(0x28000), s.at(kRecvArea + 20000), 700) == 0);

    // Inline data: copied by the setter, the source rewritten before wr_complete.
    char src[200];
    std::memset(src, 'I', sizeof src);
    ibv_wr_start(x);
    x->wr_id = 50;
    ibv_wr_send(x);
    ibv_wr_set_inline_data(x, src, sizeof src);
    std::memset(src, 'X', sizeof src);
    CHECK(ibv_wr_complete(x) == 0);
    CHECK(completed(c.cq, 50, IBV_WC_SEND));
    uint32_t n = r.next;
    CHECK(r.expect(IBV_WC_RECV, sizeof src));
    CHECK(r.data(n)[0] == 'I' && r.data(n)[sizeof src - 1] == 'I');
    // ... from a list of buffers, into an RDMA Write.
    char p1[10], p2[20], p3[30];
    std::memset(p1, '1', sizeof p1);
    std::memset(p2, '2', sizeof p2);
    std::memset(p3, '3', sizeof p3);
    const ibv_data_buf bufs[3] = {{p1, sizeof p1}, {p2, sizeof p2}, {p3, sizeof p3}};
    ibv_wr_start(x);
    x->wr_id = 51;
    ibv_wr_rdma_write(x, s.mr->rkey, s_base + kRecvArea + 30000);
    ibv_wr_set_inline_data_list(x, 3, bufs);
    std::memset(p2, 'X', sizeof p2);
    x->wr_id = 52;
    ibv_wr_send(x);
    CHECK(ibv_wr_complete(x) == 0);
    CHECK(completed(c.cq, 51, IBV_WC_RDMA_WRITE) && completed(c.cq, 52, IBV_WC_SEND));
    CHECK(r.expect(IBV_WC_RECV, 0));
    CHECK(std::memcmp(s.at(kRecvArea + 30000), "1111111111", 10) == 0 && s.at(kRecvArea + 30010)[0] == '2' &&
          s.at(kRecvArea + 30029)[0] == '2' && s.at(kRecvArea + 30030)[0] == '3' &&
          s.at(kRecvArea + 30059)[0] == '3');
    // IBV_SEND_INLINE in wr_flags with an SGE: taken at wr_complete.
    std::memset(c.at(0x30000), 'F', 48);
    ibv_wr_start(x);
    x->wr_id = 53;
    x->wr_flags = IBV_SEND_SIGNALED | IBV_SEND_INLINE;
    ibv_wr_send(x);
    ibv_wr_set_sge(x, 0, c.addr(0x30000), 48);  // inline: no lkey needed
    CHECK(ibv_wr_complete(x) == 0);
    CHECK(completed(c.cq, 53, IBV_WC_SEND));
    n = r.next;
    CHECK(r.expect(IBV_WC_RECV, 48) && r.data(n)[47] == 'F');
    x->wr_flags = IBV_SEND_SIGNALED;

    // Send with Invalidate: the server's region loses its STag.
    std::vector<char> victim(4096);
    ibv_mr* vmr = ibv_reg_mr(s.pd, victim.data(), victim.size(), IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE);
    REQUIRE(vmr);
    ibv_wr_start(x);
    x->wr_id = 60;
    ibv_wr_send_inv(x, vmr->rkey);
    ibv_wr_set_sge(x, c.mr->lkey, c.addr(0x30000), 24);
    CHECK(ibv_wr_complete(x) == 0);
    CHECK(completed(c.cq, 60, IBV_WC_SEND));
    CHECK(r.expect(IBV_WC_RECV, 24, &wc) && (wc.wc_flags & IBV_WC_WITH_INV) && wc.invalidated_rkey == vmr->rkey);
    CHECK(ibv_dereg_mr(vmr) == 0);

    // Fence: a Send fenced behind a Read completes after it.
    std::memset(s.at(kRecvArea + 40000), 'Q', 4096);
    ibv_wr_start(x);
    x->wr_id = 70;
    ibv_wr_rdma_read(x, s.mr->rkey, s_base + kRecvArea + 40000);
    ibv_wr_set_sge(x, c.mr->lkey, c.addr(0x29000), 4096);
    x->wr_id = 71;
    x->wr_flags = IBV_SEND_SIGNALED | IBV_SEND_FENCE;
    ibv_wr_send(x);
    ibv_wr_set_sge(x, c.mr->lkey, c.addr(0x29000 + 3000), 1000);  // sends what the Read brings
    CHECK(ibv_wr_complete(x) == 0);
    CHECK(completed(c.cq, 70, IBV_WC_RDMA_READ) && completed(c.cq, 71, IBV_WC_SEND));
    n = r.next;
    CHECK(r.expect(IBV_WC_RECV, 1000) && std::memcmp(r.data(n), s.at(kRecvArea + 40000), 1000) == 0);
    x->wr_flags = IBV_SEND_SIGNALED;

    // Local Invalidate of one of the client's own regions.
    std::vector<char> mine(4096);
    ibv_mr* mmr = ibv_reg_mr(c.pd, mine.data(), mine.size(), IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_READ);
    REQUIRE(mmr);
    ibv_wr_start(x);
    x->wr_id = 80;
    ibv_wr_local_inv(x, mmr->rkey);
    CHECK(ibv_wr_complete(x) == 0);
    CHECK(completed(c.cq, 80, IBV_WC_LOCAL_INV));
    CHECK(ibv_dereg_mr(mmr) == 0);

    // Solicited: an armed solicited-only CQ wakes for the SOLICITED Send only.
    CHECK(ibv_req_notify_cq(s.cq, 1) == 0);
    ibv_wr_start(x);
    x->wr_id = 90;
    ibv_wr_send(x);
    CHECK(ibv_wr_complete(x) == 0);
    CHECK(completed(c.cq, 90, IBV_WC_SEND) && r.expect(IBV_WC_RECV, 0));
    pollfd pfd{s.ch->fd, POLLIN, 0};
    CHECK(poll(&pfd, 1, 100) == 0);
    ibv_wr_start(x);
    x->wr_id = 91;
    x->wr_flags = IBV_SEND_SIGNALED | IBV_SEND_SOLICITED;
    ibv_wr_send(x);
    CHECK(ibv_wr_complete(x) == 0);
    CHECK(poll(&pfd, 1, kTimeoutMs) == 1);
    ibv_cq* ev_cq = nullptr;
    void* ev_ctx = nullptr;
    CHECK(ibv_get_cq_event(s.ch, &ev_cq, &ev_ctx) == 0 && ev_cq == s.cq);
    ibv_ack_cq_events(s.cq, 1);
    CHECK(completed(c.cq, 91, IBV_WC_SEND) && r.expect(IBV_WC_RECV, 0));
    x->wr_flags = IBV_SEND_SIGNALED;

    // ibv_post_send still serves the same QP between critical regions.
    ibv_sge sge{c.addr(0x30000), 12, c.mr->lkey};
    ibv_send_wr wr{};
    wr.wr_id = 95;
    wr.opcode = IBV_WR_SEND;
    wr.sg_list = &sge;
    wr.num_sge = 1;
    wr.send_flags = IBV_SEND_SIGNALED;
    ibv_send_wr* bad = nullptr;
    CHECK(ibv_post_send(c.id->qp, &wr, &bad) == 0);
    CHECK(completed(c.cq, 95, IBV_WC_SEND) && r.expect(IBV_WC_RECV, 12));
}

// Each refused batch posts nothing: no completion, and the probe after it
// lands in the receive WR the batch would have taken.
void check_errors(Side& c, Side& s, Receiver& r, bool atomics, bool windows)
{
    ibv_qp_ex* x = c.qpx;
    uint64_t probe_id = 200;
    auto nothing_posted = [&](int rc, int want, const char* what) {
        const bool ok = rc == want;
        if (!ok) std::fprintf(stderr, "%s: wr_complete %d, wanted %d\n", what, rc, want);
        CHECK(ok);
        CHECK(quiet(c.cq, 20));
        CHECK(probe(c, r, probe_id++));
    };
    x->wr_flags = IBV_SEND_SIGNALED;

    // One WR more than max_send_wr.
    ibv_wr_start(x);
    for (uint32_t i = 0; i <= c.cap.max_send_wr; ++i) {
        x->wr_id = 100 + i;
        ibv_wr_send(x);
        ibv_wr_set_sge(x, c.mr->lkey, c.addr(0x30000), 8);
    }
    nothing_posted(ibv_wr_complete(x), ENOMEM, "max_send_wr + 1 WRs");

    // More SGEs than max_send_sge, after a good WR.
    std::vector<ibv_sge> many(c.cap.max_send_sge + 1, ibv_sge{c.addr(0x30000), 4, c.mr->lkey});
    ibv_wr_start(x);
    ibv_wr_send(x);
    ibv_wr_set_sge(x, c.mr->lkey, c.addr(0x30000), 8);
    ibv_wr_send(x);
    ibv_wr_set_sge_list(x, many.size(), many.data());
    nothing_posted(ibv_wr_complete(x), EINVAL, "max_send_sge + 1 SGEs");
    // Exactly max_send_sge is fine.
    ibv_wr_start(x);
    x->wr_id = 150;
    ibv_wr_send(x);
    ibv_wr_set_sge_list(x, c.cap.max_send_sge, many.data());
    CHECK(ibv_wr_complete(x) == 0);
    CHECK(completed(c.cq, 150, IBV_WC_SEND) && r.expect(IBV_WC_RECV, 4 * c.cap.max_send_sge));

    // Inline data beyond max_inline_data, alone and as a list; at the limit it goes.
    std::vector<char> big(c.cap.max_inline_data + 1, 'B');
    ibv_wr_start(x);
    ibv_wr_send(x);
    ibv_wr_set_inline_data(x, big.data(), big.size());
    nothing_posted(ibv_wr_complete(x), EINVAL, "inline max_inline_data + 1");
    const ibv_data_buf halves[2] = {{big.data(), big.size() / 2}, {big.data(), big.size() - big.size() / 2}};
    ibv_wr_start(x);
    ibv_wr_rdma_write(x, s.mr->rkey, s.addr(kRecvArea));
    ibv_wr_set_inline_data_list(x, 2, halves);
    nothing_posted(ibv_wr_complete(x), EINVAL, "inline list max_inline_data + 1");
    ibv_wr_start(x);
    x->wr_id = 151;
    ibv_wr_send(x);
    ibv_wr_set_inline_data(x, big.data(), c.cap.max_inline_data);
    CHECK(ibv_wr_complete(x) == 0);
    CHECK(completed(c.cq, 151, IBV_WC_SEND) && r.expect(IBV_WC_RECV, c.cap.max_inline_data));

    // Inline data on an RDMA Read.
    ibv_wr_start(x);
    ibv_wr_rdma_read(x, s.mr->rkey, s.addr(kRecvArea));
    ibv_wr_set_inline_data(x, big.data(), 8);
    nothing_posted(ibv_wr_complete(x), EINVAL, "inline Read");

    // A setter with no builder before it.
    ibv_wr_start(x);
    ibv_wr_set_sge(x, c.mr->lkey, c.addr(0x30000), 8);
    nothing_posted(ibv_wr_complete(x), EINVAL, "setter without builder");

    // The emulator refuses the second WR (IBV_SEND_INLINE on a Read): the
    // first, valid on its own, is not posted either.
    ibv_wr_start(x);
    x->wr_id = 160;
    ibv_wr_send(x);
    ibv_wr_set_sge(x, c.mr->lkey, c.addr(0x30000), 8);
    x->wr_id = 161;
    x->wr_flags = IBV_SEND_SIGNALED | IBV_SEND_INLINE;
    ibv_wr_rdma_read(x, s.mr->rkey, s.addr(kRecvArea));
    ibv_wr_set_sge(x, c.mr->lkey, c.addr(0x30000), 8);
    x->wr_flags = IBV_SEND_SIGNALED;
    nothing_posted(ibv_wr_complete(x), EINVAL, "batch refused at its second WR");

    // Builders the QP was not created with, and UD/XRC addressing on RC.
    ibv_wr_start(x);
    ibv_wr_send_imm(x, htonl(1));
    nothing_posted(ibv_wr_complete(x), EOPNOTSUPP, "send with immediate");
    if (!atomics) {
        ibv_wr_start(x);
        ibv_wr_atomic_fetch_add(x, s.mr->rkey, s.addr(kRecvArea), 1);
        ibv_wr_set_sge(x, c.mr->lkey, c.addr(0x30000), 8);
        nothing_posted(ibv_wr_complete(x), EOPNOTSUPP, "fetch and add (device has no atomics)");
    }
    if (!windows) {
        ibv_wr_start(x);
        ibv_wr_bind_mw(x, nullptr, 0, nullptr);
        nothing_posted(ibv_wr_complete(x), EOPNOTSUPP, "bind mw (device has no windows)");
    }
    ibv_wr_start(x);
    ibv_wr_send(x);
    ibv_wr_set_ud_addr(x, nullptr, 1, 1);
    nothing_posted(ibv_wr_complete(x), EINVAL, "UD address on RC");
    ibv_wr_start(x);
    ibv_wr_send(x);
    ibv_wr_set_xrc_srqn(x, 1);
    nothing_posted(ibv_wr_complete(x), EINVAL, "XRC SRQN on RC");
    // The server's QP was created with Send only.
    ibv_wr_start(s.qpx);
    ibv_wr_rdma_write(s.qpx, c.mr->rkey, c.addr(0));
    ibv_wr_set_sge(s.qpx, s.mr->lkey, s.addr(kRecvArea), 8);
    CHECK(ibv_wr_complete(s.qpx) == EOPNOTSUPP);
    ibv_wr_start(s.qpx);
    ibv_wr_rdma_read(s.qpx, c.mr->rkey, c.addr(0));
    ibv_wr_abort(s.qpx);

    // ibv_wr_abort discards what was built.
    ibv_wr_start(x);
    for (int i = 0; i < 4; ++i) {
        ibv_wr_send(x);
        ibv_wr_set_sge(x, c.mr->lkey, c.addr(0x30000), 8);
    }
    ibv_wr_abort(x);
    CHECK(quiet(c.cq, 20));
    CHECK(probe(c, r, probe_id++));
    // An error does not outlive its region.
    CHECK(probe(c, r, probe_id++));
}

// Two threads post through one QP, each in its own critical regions.
void check_threads(Side& c, Side& s)
{
    constexpr int kPerThread = 200, kBatch = 4;
    std::atomic<int> failures{0};
    auto worker = [&](uint64_t base) {
        for (int i = 0; i < kPerThread; i += kBatch) {
            for (int attempt = 0;; ++attempt) {
                ibv_wr_start(c.qpx);
                c.qpx->wr_flags = IBV_SEND_SIGNALED;
                for (int k = 0; k < kBatch; ++k) {
                    c.qpx->wr_id = base + i + k;
                    ibv_wr_rdma_write(c.qpx, s.mr->rkey, s.addr(kRecvArea + 65536 + (base >> 4)));
                    ibv_wr_set_sge(c.qpx, c.mr->lkey, c.addr(0x20000), 256);
                }
                const int rc = ibv_wr_complete(c.qpx);
                if (rc == 0) break;
                if (rc != ENOMEM || attempt > 5000) {  // a full SQ drains as TCP takes the Writes
                    ++failures;
                    return;
                }
                poll(nullptr, 0, 1);
            }
        }
    };
    std::thread t1(worker, 10000), t2(worker, 20000);
    t1.join();
    t2.join();
    CHECK(failures == 0);
    std::set<uint64_t> seen;
    for (int i = 0; i < 2 * kPerThread; ++i) {
        ibv_wc wc{};
        if (!poll_one(c.cq, &wc)) break;
        CHECK(wc.status == IBV_WC_SUCCESS && wc.opcode == IBV_WC_RDMA_WRITE);
        seen.insert(wc.wr_id);
    }
    CHECK(seen.size() == 2 * kPerThread);
    CHECK(seen.size() && *seen.begin() == 10000 && *seen.rbegin() == 20000 + kPerThread - 1);
    CHECK(quiet(c.cq, 20));
}

// Device atomics (RFC 7306) through the builders, once the device has them.
void check_atomics(Side& c, Side& s)
{
    uint64_t* target = reinterpret_cast<uint64_t*>(s.at(kRecvArea + 0x8000));
    uint64_t* result = reinterpret_cast<uint64_t*>(c.at(0x2f000));
    *target = 5;
    ibv_qp_ex* x = c.qpx;
    ibv_wr_start(x);
    x->wr_id = 300;
    x->wr_flags = IBV_SEND_SIGNALED;
    ibv_wr_atomic_cmp_swp(x, s.mr->rkey, s.addr(kRecvArea + 0x8000), 5, 9);
    ibv_wr_set_sge(x, c.mr->lkey, c.addr(0x2f000), 8);
    CHECK(ibv_wr_complete(x) == 0);
    CHECK(completed(c.cq, 300, IBV_WC_COMP_SWAP) && *result == 5);
    ibv_wr_start(x);
    x->wr_id = 301;
    ibv_wr_atomic_fetch_add(x, s.mr->rkey, s.addr(kRecvArea + 0x8000), 3);
    ibv_wr_set_sge(x, c.mr->lkey, c.addr(0x2f000), 8);
    CHECK(ibv_wr_complete(x) == 0);
    CHECK(completed(c.cq, 301, IBV_WC_FETCH_ADD) && *result == 9);
    // The Read that follows sees the sum (ordered behind the atomic).
    ibv_wr_start(x);
    x->wr_id = 302;
    ibv_wr_rdma_read(x, s.mr->rkey, s.addr(kRecvArea + 0x8000));
    ibv_wr_set_sge(x, c.mr->lkey, c.addr(0x2f000), 8);
    CHECK(ibv_wr_complete(x) == 0);
    CHECK(completed(c.cq, 302, IBV_WC_RDMA_READ) && *result == 12);
}

// A type 2 window bound through ibv_wr_bind_mw, then read by the server
// through the window's new STag, once the device has windows.
void check_bind_mw(Side& c, Side& s)
{
    ibv_mw* mw = ibv_alloc_mw(c.pd, IBV_MW_TYPE_2);
    CHECK(mw != nullptr);
    if (!mw) return;
    const uint32_t rkey = ibv_inc_rkey(mw->rkey);
    std::memset(c.at(0x2e000), 'M', 256);
    ibv_mw_bind_info info{c.mr, c.addr(0x2e000), 256, IBV_ACCESS_REMOTE_READ};
    ibv_wr_start(c.qpx);
    c.qpx->wr_id = 400;
    c.qpx->wr_flags = IBV_SEND_SIGNALED;
    ibv_wr_bind_mw(c.qpx, mw, rkey, &info);
    CHECK(ibv_wr_complete(c.qpx) == 0);
    CHECK(completed(c.cq, 400, IBV_WC_BIND_MW));
    ibv_sge sge{s.addr(kRecvArea + 0x9000), 256, s.mr->lkey};
    ibv_send_wr wr{};
    wr.wr_id = 401;
    wr.opcode = IBV_WR_RDMA_READ;
    wr.sg_list = &sge;
    wr.num_sge = 1;
    wr.send_flags = IBV_SEND_SIGNALED;
    wr.wr.rdma.remote_addr = c.addr(0x2e000);
    wr.wr.rdma.rkey = rkey;
    ibv_send_wr* bad = nullptr;
    CHECK(ibv_post_send(s.id->qp, &wr, &bad) == 0);
    CHECK(completed(s.cq, 401, IBV_WC_RDMA_READ));
    CHECK(std::memcmp(s.at(kRecvArea + 0x9000), c.at(0x2e000), 256) == 0);
    CHECK(ibv_dealloc_mw(mw) == 0);
}

}  // namespace

int main()
{
    CmLoopback l = cm_loopback_resolved();
    rdma_event_channel* ech_s = l.ech_s;
    rdma_event_channel* ech_c = l.ech_c;
    rdma_cm_id* cid = l.client;
    REQUIRE(cid->verbs);
    ibv_device_attr dev{};
    REQUIRE(ibv_query_device(cid->verbs, &dev) == 0);
    check_create(cid->verbs, dev);
    check_room(cid->verbs);

    const bool atomics = dev.atomic_cap != IBV_ATOMIC_NONE, windows = dev.max_mw > 0;
    uint64_t ops = kBaseOps;
    int access = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ;
    if (atomics) {
        ops |= IBV_QP_EX_WITH_ATOMIC_CMP_AND_SWP | IBV_QP_EX_WITH_ATOMIC_FETCH_AND_ADD;
        access |= IBV_ACCESS_REMOTE_ATOMIC;
    }
    if (windows) {
        ops |= IBV_QP_EX_WITH_BIND_MW;
        access |= IBV_ACCESS_MW_BIND;
    }
    Side c, s;
    setup(c, cid, ops, access);
    rdma_conn_param cp{};
    cp.responder_resources = 4;
    cp.initiator_depth = 4;
    rdma_cm_id* sid = cm_loopback_connect(l, cp);
    setup(s, sid, IBV_QP_EX_WITH_SEND, access);
    post_recvs(s);
    cm_loopback_accept(l, sid, cp);

    Receiver r{&s};
    check_operations(c, s, r);
    check_errors(c, s, r, atomics, windows);
    check_threads(c, s);
    if (atomics) check_atomics(c, s);
    if (windows) check_bind_mw(c, s);
    std::printf("verbs_qp_ex: atomics %s, memory windows %s\n", atomics ? "run" : "refused at creation",
                windows ? "run" : "refused at creation");

    rdma_disconnect(cid);
    expect_cm_event(ech_c, RDMA_CM_EVENT_DISCONNECTED);
    expect_cm_event(ech_s, RDMA_CM_EVENT_DISCONNECTED);
    for (Side* x : {&c, &s}) {
        rdma_destroy_qp(x->id);
        CHECK(ibv_destroy_cq(x->cq) == 0);
        CHECK(ibv_destroy_comp_channel(x->ch) == 0);
        CHECK(ibv_dereg_mr(x->mr) == 0);
        CHECK(ibv_dealloc_pd(x->pd) == 0);
    }
    rdma_destroy_id(sid);
    rdma_destroy_id(cid);
    cm_loopback_release(l);
    return iwemu::test::check_exit_status("verbs_qp_ex", "all checks passed");
}
