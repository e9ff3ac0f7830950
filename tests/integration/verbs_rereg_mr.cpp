// ibv_rereg_mr through the distro's libibverbs (issue 26; what rdma-core's
// test_mr_rereg_* expect).  Each case connects a fresh pair of RC QPs over
// loopback through librdmacm, both ends in this process, rereggs the
// server's MR and sends RDMA WRITEs from the client with the keys it had:
//   - CHANGE_ACCESS: the keys stay; after remote write is taken away a
//     Write fails at the client with a remote access error (the server's
//     Terminate), before it was placed;
//   - CHANGE_TRANSLATION: the same rkey now places into the new buffer;
//   - CHANGE_PD: an MR moved to a PD the QP is not in refuses the Write;
//     moved back it accepts it; a PD holding a rereg'd MR cannot be freed;
//   - input checks: access without CHANGE_ACCESS, TRANSLATION without an
//     address, CHANGE_PD without a PD.
// Every wait is bounded.
#include <arpa/inet.h>
#include <infiniband/verbs.h>
#include <poll.h>
#include <rdma/rdma_cma.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "check.h"
#include "rc_qp_attr.h"

namespace {

constexpr int kTimeoutMs = 5000;
constexpr size_t kBuf = 1 << 14;
constexpr int kRemote = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE;

rdma_cm_id* expect_event(rdma_event_channel* ch, rdma_cm_event_type type)
{
    pollfd p{ch->fd, POLLIN, 0};
    if (poll(&p, 1, kTimeoutMs) != 1) return nullptr;
    rdma_cm_event* ev = nullptr;
    if (rdma_get_cm_event(ch, &ev) != 0) return nullptr;
    rdma_cm_id* id = ev->id;
    bool ok = ev->event == type && ev->status == 0;
    rdma_ack_cm_event(ev);
    return ok ? id : nullptr;
}

struct Side {
    rdma_cm_id* id = nullptr;
    ibv_pd* pd = nullptr;
    ibv_cq* cq = nullptr;
    ibv_mr* mr = nullptr;
    ibv_mr* probe = nullptr;  // what the client Reads after each Write
    std::vector<char> buf = std::vector<char>(kBuf);
    std::vector<char> probe_buf = std::vector<char>(64);
};

void setup(Side& s, rdma_cm_id* id)
{
    s.id = id;
    s.pd = ibv_alloc_pd(id->verbs);
    REQUIRE(s.pd);
    s.cq = ibv_create_cq(id->verbs, 16, nullptr, nullptr, 0);
    REQUIRE(s.cq);
    s.mr = ibv_reg_mr(s.pd, s.buf.data(), s.buf.size(), kRemote);
    REQUIRE(s.mr);
    s.probe = ibv_reg_mr(s.pd, s.probe_buf.data(), s.probe_buf.size(),
                         IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_READ);
    REQUIRE(s.probe);
    ibv_qp_init_attr ia = iwemu::test::rc_qp_attr(s.cq, {8, 8, 1, 1, 0});
    REQUIRE(rdma_create_qp(id, s.pd, &ia) == 0);
}

struct Pair {
    rdma_event_channel* ech_s = nullptr;
    rdma_event_channel* ech_c = nullptr;
    rdma_cm_id* listen_id = nullptr;
    Side c, s;
};

void connect_pair(Pair& p)
{
    p.ech_s = rdma_create_event_channel();
    p.ech_c = rdma_create_event_channel();
    REQUIRE(p.ech_s && p.ech_c);
    REQUIRE(rdma_create_id(p.ech_s, &p.listen_id, nullptr, RDMA_PS_TCP) == 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    REQUIRE(rdma_bind_addr(p.listen_id, reinterpret_cast<sockaddr*>(&addr)) == 0);
    REQUIRE(rdma_listen(p.listen_id, 1) == 0);
    addr.sin_port = rdma_get_src_port(p.listen_id);
    rdma_cm_id* cid = nullptr;
    REQUIRE(rdma_create_id(p.ech_c, &cid, nullptr, RDMA_PS_TCP) == 0);
    REQUIRE(rdma_resolve_addr(cid, nullptr, reinterpret_cast<sockaddr*>(&addr), 2000) == 0);
    REQUIRE(expect_event(p.ech_c, RDMA_CM_EVENT_ADDR_RESOLVED));
    REQUIRE(rdma_resolve_route(cid, 2000) == 0);
    REQUIRE(expect_event(p.ech_c, RDMA_CM_EVENT_ROUTE_RESOLVED));
    setup(p.c, cid);
    rdma_conn_param cp{};
    cp.responder_resources = 1;
    cp.initiator_depth = 1;
    REQUIRE(rdma_connect(cid, &cp) == 0);
    rdma_cm_id* sid = expect_event(p.ech_s, RDMA_CM_EVENT_CONNECT_REQUEST);
    REQUIRE(sid);
    setup(p.s, sid);
    REQUIRE(rdma_accept(sid, &cp) == 0);
    REQUIRE(expect_event(p.ech_c, RDMA_CM_EVENT_ESTABLISHED));
    REQUIRE(expect_event(p.ech_s, RDMA_CM_EVENT_ESTABLISHED));
}

void close_pair(Pair& p)
{
    rdma_disconnect(p.c.id);
    for (Side* side : {&p.c, &p.s}) {
        rdma_destroy_qp(side->id);
        CHECK(ibv_dereg_mr(side->mr) == 0);
        CHECK(ibv_dereg_mr(side->probe) == 0);
        CHECK(ibv_destroy_cq(side->cq) == 0);
        CHECK(ibv_dealloc_pd(side->pd) == 0);
        CHECK(rdma_destroy_id(side->id) == 0);
    }
    CHECK(rdma_destroy_id(p.listen_id) == 0);
    rdma_destroy_event_channel(p.ech_c);
    rdma_destroy_event_channel(p.ech_s);
}

// A Write of `len` octets from the client's buffer to `remote` under
// `rkey`, then a Read of the server's probe: a Write completes locally when
// sent, the Read only after the server has handled the Write (RDMAP orders
// them), so its completion says whether the Write was placed.  Returns the
// first status that is not success (-1: no completion within the bound).
int write(Pair& p, uint64_t remote, uint32_t rkey, uint32_t len)
{
    ibv_sge sge[2] = {{reinterpret_cast<uintptr_t>(p.c.buf.data()), len, p.c.mr->lkey},
                      {reinterpret_cast<uintptr_t>(p.c.buf.data() + kBuf - 8), 8, p.c.mr->lkey}};
    ibv_send_wr wr[2] = {};
    wr[0].wr_id = 7;
    wr[0].opcode = IBV_WR_RDMA_WRITE;
    wr[0].sg_list = &sge[0];
    wr[0].num_sge = 1;
    wr[0].send_flags = IBV_SEND_SIGNALED;
    wr[0].wr.rdma.remote_addr = remote;
    wr[0].wr.rdma.rkey = rkey;
    wr[0].next = &wr[1];
    wr[1].wr_id = 8;
    wr[1].opcode = IBV_WR_RDMA_READ;
    wr[1].sg_list = &sge[1];
    wr[1].num_sge = 1;
    wr[1].send_flags = IBV_SEND_SIGNALED;
    wr[1].wr.rdma.remote_addr = reinterpret_cast<uintptr_t>(p.s.probe_buf.data());
    wr[1].wr.rdma.rkey = p.s.probe->rkey;
    ibv_send_wr* bad = nullptr;
    if (ibv_post_send(p.c.id->qp, wr, &bad) != 0) return -1;
    int status = IBV_WC_SUCCESS;
    int got = 0;
    for (int ms = 0; ms < kTimeoutMs && got < 2; ++ms) {
        ibv_wc wc{};
        int n = ibv_poll_cq(p.c.cq, 1, &wc);
        if (n < 0) return -1;
        if (n == 0) {
            poll(nullptr, 0, 1);
            continue;
        }
        ++got;
        if (status == IBV_WC_SUCCESS) status = wc.status;
    }
    return got == 2 ? status : -1;
}

uint64_t base(const Side& s) { return reinterpret_cast<uintptr_t>(s.buf.data()); }

void access_case()
{
    Pair p;
    connect_pair(p);
    const uint32_t lkey = p.s.mr->lkey, rkey = p.s.mr->rkey;
    std::memset(p.c.buf.data(), 'A', 64);
    CHECK(write(p, base(p.s), rkey, 64) == IBV_WC_SUCCESS);
    CHECK(p.s.buf[63] == 'A');

    // Same rights again: a no-op that keeps the keys.
    CHECK(ibv_rereg_mr(p.s.mr, IBV_REREG_MR_CHANGE_ACCESS, nullptr, nullptr, 0, kRemote) == 0);
    CHECK(p.s.mr->lkey == lkey && p.s.mr->rkey == rkey);
    std::memset(p.c.buf.data(), 'B', 64);
    CHECK(write(p, base(p.s), rkey, 64) == IBV_WC_SUCCESS);
    CHECK(p.s.buf[0] == 'B');

    // Remote write taken away: the old rkey no longer writes.
    CHECK(ibv_rereg_mr(p.s.mr, IBV_REREG_MR_CHANGE_ACCESS, nullptr, nullptr, 0, IBV_ACCESS_LOCAL_WRITE) == 0);
    CHECK(p.s.mr->lkey == lkey && p.s.mr->rkey == rkey);
    std::memset(p.c.buf.data(), 'C', 64);
    CHECK(write(p, base(p.s), rkey, 64) == IBV_WC_REM_ACCESS_ERR);
    CHECK(p.s.buf[0] == 'B');
    close_pair(p);
}

void translation_case()
{
    Pair p;
    connect_pair(p);
    const uint32_t rkey = p.s.mr->rkey;
    std::vector<char> other(kBuf / 2);
    CHECK(ibv_rereg_mr(p.s.mr, IBV_REREG_MR_CHANGE_TRANSLATION, nullptr, other.data(), other.size(), 0) == 0);
    CHECK(p.s.mr->rkey == rkey && p.s.mr->addr == other.data() && p.s.mr->length == other.size());
    std::memset(p.c.buf.data(), 'T', 128);
    CHECK(write(p, reinterpret_cast<uintptr_t>(other.data()) + 64, rkey, 128) == IBV_WC_SUCCESS);
    CHECK(other[64] == 'T' && other[191] == 'T' && p.s.buf[64] != 'T');
    // The old buffer is outside the region now.
    CHECK(write(p, base(p.s) + kBuf - 256, rkey, 128) != IBV_WC_SUCCESS);
    close_pair(p);
}

void pd_case()
{
    Pair p;
    connect_pair(p);
    ibv_pd* other = ibv_alloc_pd(p.s.id->verbs);
    REQUIRE(other);
    const uint32_t rkey = p.s.mr->rkey;
    CHECK(ibv_rereg_mr(p.s.mr, IBV_REREG_MR_CHANGE_PD, other, nullptr, 0, 0) == 0);
    CHECK(p.s.mr->pd == other && p.s.mr->rkey == rkey);
    CHECK(ibv_dealloc_pd(other) != 0);  // the MR lives in it now
    CHECK(ibv_rereg_mr(p.s.mr, IBV_REREG_MR_CHANGE_PD, p.s.pd, nullptr, 0, 0) == 0);
    std::memset(p.c.buf.data(), 'P', 32);
    CHECK(write(p, base(p.s), rkey, 32) == IBV_WC_SUCCESS);
    CHECK(p.s.buf[31] == 'P');
    CHECK(ibv_rereg_mr(p.s.mr, IBV_REREG_MR_CHANGE_PD, other, nullptr, 0, 0) == 0);
    std::memset(p.c.buf.data(), 'Q', 32);
    CHECK(write(p, base(p.s), rkey, 32) != IBV_WC_SUCCESS);
    CHECK(p.s.buf[0] == 'P');
    CHECK(ibv_rereg_mr(p.s.mr, IBV_REREG_MR_CHANGE_PD, p.s.pd, nullptr, 0, 0) == 0);
    CHECK(ibv_dealloc_pd(other) == 0);
    close_pair(p);
}

void input_case()
{
    Pair p;
    connect_pair(p);
    ibv_mr* mr = p.s.mr;
    CHECK(ibv_rereg_mr(mr, 0, nullptr, nullptr, 0, IBV_ACCESS_LOCAL_WRITE) == IBV_REREG_MR_ERR_INPUT);
    CHECK(ibv_rereg_mr(mr, IBV_REREG_MR_CHANGE_TRANSLATION, nullptr, nullptr, 0, 0) == IBV_REREG_MR_ERR_INPUT);
    CHECK(ibv_rereg_mr(mr, IBV_REREG_MR_CHANGE_PD, nullptr, nullptr, 0, 0) != 0);
    // Remote write without local write is refused and changes nothing.
    CHECK(ibv_rereg_mr(mr, IBV_REREG_MR_CHANGE_ACCESS, nullptr, nullptr, 0, IBV_ACCESS_REMOTE_WRITE) != 0);
    std::memset(p.c.buf.data(), 'I', 16);
    CHECK(write(p, base(p.s), mr->rkey, 16) == IBV_WC_SUCCESS);
    CHECK(p.s.buf[15] == 'I');
    close_pair(p);
}

}  // namespace

int main()
{
    access_case();
    translation_case();
    pd_case();
    input_case();
    return iwemu::test::check_exit_status("verbs_rereg_mr", "all checks passed");
}
