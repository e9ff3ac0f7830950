// Memory windows through the distro's libibverbs (issue 26; what rdma-core's
// test_mr MWTest exercises).  Each case connects a fresh pair of RC QPs over
// loopback through librdmacm, both ends in this process.  The server's MR
// has no remote right (LOCAL_WRITE | MW_BIND); the client reaches it only
// through a window the server binds:
//   - type 1, bound by ibv_bind_mw: mw->rkey takes the next key, the
//     client Writes and Reads through it, the MR cannot be deregistered while
//     the window is bound, a zero-length bind unbinds it and the next Write
//     fails with a remote access error (the server's Terminate);
//   - type 2, bound by an IBV_WR_BIND_MW work request: the client Writes and
//     Reads through it, then invalidates it with a Send with Invalidate: the
//     server's receive completion carries IBV_WC_WITH_INV and the key, and
//     the next Write fails and places nothing;
//   - input checks: no type 3, ibv_bind_mw on a type 2 window, a bind of a
//     region without MW_BIND completes with IBV_WC_MW_BIND_ERR.
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
#include "probed_pair.h"

namespace {

using namespace iwemu::test;
constexpr int kTimeoutMs = kPairTimeoutMs;
constexpr size_t kBuf = kPairBuf;

// The server's memory: no remote right of its own, only windows over it.
constexpr int kBindable = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_MW_BIND;

using Pair = ProbedPair;
using Side = ProbedSide;

void connect_pair(Pair& p) { connect_probed_pair(p, {kBindable, {16, 8, 1, 1, 0}}); }
uint64_t base(const Side& s) { return s.base(); }

// The next completion on `cq` (false: none within the bound).
bool next_wc(ibv_cq* cq, ibv_wc* wc)
{
    for (int ms = 0; ms < kTimeoutMs; ++ms) {
        const int n = ibv_poll_cq(cq, 1, wc);
        if (n < 0) return false;
        if (n == 1) return true;
        poll(nullptr, 0, 1);
    }
    return false;
}

// The client Reads `len` octets at `remote` under `rkey` into the end of its buffer.
int read(Pair& p, uint64_t remote, uint32_t rkey, uint32_t len)
{
    ibv_sge sge{reinterpret_cast<uintptr_t>(p.c.buf.data() + kBuf / 2), len, p.c.mr->lkey};
    ibv_send_wr wr{};
    wr.wr_id = 9;
    wr.opcode = IBV_WR_RDMA_READ;
    wr.sg_list = &sge;
    wr.num_sge = 1;
    wr.send_flags = IBV_SEND_SIGNALED;
    wr.wr.rdma.remote_addr = remote;
    wr.wr.rdma.rkey = rkey;
    ibv_send_wr* bad = nullptr;
    if (ibv_post_send(p.c.id->qp, &wr, &bad) != 0) return -1;
    ibv_wc wc{};
    return next_wc(p.c.cq, &wc) ? wc.status : -1;
}

void type1_case()
{
    Pair p;
    connect_pair(p);
    ibv_mw* mw = ibv_alloc_mw(p.s.pd, IBV_MW_TYPE_1);
    REQUIRE(mw);
    const uint32_t first = mw->rkey;
    ibv_mw_bind bind{};
    bind.wr_id = 21;
    bind.send_flags = IBV_SEND_SIGNALED;
    bind.bind_info = {p.s.mr, base(p.s) + 1024, 4096, IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ};
    CHECK(ibv_bind_mw(p.s.id->qp, mw, &bind) == 0);
    CHECK(mw->rkey == ibv_inc_rkey(first));
    ibv_wc wc{};
    CHECK(next_wc(p.s.cq, &wc) && wc.wr_id == 21 && wc.opcode == IBV_WC_BIND_MW && wc.status == IBV_WC_SUCCESS);
    // Through the window only: the MR's own rkey has no remote right.
    std::memset(p.c.buf.data(), 'W', 4096);
    CHECK(write_then_probe(p, base(p.s) + 1024, mw->rkey, 4096) == IBV_WC_SUCCESS);
    CHECK(p.s.buf[1024] == 'W' && p.s.buf[1024 + 4095] == 'W' && p.s.buf[1023] == 0 && p.s.buf[1024 + 4096] == 0);
    std::memset(p.s.buf.data() + 2048, 'R', 16);
    CHECK(read(p, base(p.s) + 2048, mw->rkey, 16) == IBV_WC_SUCCESS);
    CHECK(p.c.buf[kBuf / 2] == 'R' && p.c.buf[kBuf / 2 + 15] == 'R');
    // Bound: the region stays (IBA 10.6.7.2.6).
    CHECK(ibv_dereg_mr(p.s.mr) != 0);
    // A zero-length bind unbinds; the next Write is refused by the server.
    const uint32_t bound = mw->rkey;
    bind.wr_id = 22;
    bind.bind_info = {p.s.mr, base(p.s), 0, 0};
    CHECK(ibv_bind_mw(p.s.id->qp, mw, &bind) == 0);
    CHECK(next_wc(p.s.cq, &wc) && wc.wr_id == 22 && wc.status == IBV_WC_SUCCESS);
    std::memset(p.c.buf.data(), 'X', 64);
    CHECK(write_then_probe(p, base(p.s) + 1024, bound, 64) == IBV_WC_REM_ACCESS_ERR);
    CHECK(p.s.buf[1024] == 'W');
    CHECK(ibv_dealloc_mw(mw) == 0);
    close_probed_pair(p);
}

void type2_case()
{
    Pair p;
    connect_pair(p);
    ibv_mw* mw = ibv_alloc_mw(p.s.pd, IBV_MW_TYPE_2);
    REQUIRE(mw);
    ibv_send_wr wr{};
    wr.wr_id = 31;
    wr.opcode = IBV_WR_BIND_MW;
    wr.send_flags = IBV_SEND_SIGNALED;
    wr.bind_mw.mw = mw;
    wr.bind_mw.rkey = ibv_inc_rkey(mw->rkey);
    wr.bind_mw.bind_info = {p.s.mr, base(p.s), kBuf, IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ};
    const uint32_t rkey = wr.bind_mw.rkey;
    ibv_send_wr* bad = nullptr;
    CHECK(ibv_post_send(p.s.id->qp, &wr, &bad) == 0);
    ibv_wc wc{};
    CHECK(next_wc(p.s.cq, &wc) && wc.wr_id == 31 && wc.opcode == IBV_WC_BIND_MW && wc.status == IBV_WC_SUCCESS);
    std::memset(p.c.buf.data(), 'Y', 256);
    CHECK(write_then_probe(p, base(p.s) + 512, rkey, 256) == IBV_WC_SUCCESS);
    CHECK(p.s.buf[512] == 'Y' && p.s.buf[767] == 'Y');
    CHECK(read(p, base(p.s) + 512, rkey, 256) == IBV_WC_SUCCESS);
    CHECK(p.c.buf[kBuf / 2 + 255] == 'Y');
    // The client invalidates the window with its Send.
    ibv_sge rsge{reinterpret_cast<uintptr_t>(p.s.probe_buf.data()), 64, p.s.probe->lkey};
    ibv_recv_wr rwr{};
    rwr.wr_id = 41;
    rwr.sg_list = &rsge;
    rwr.num_sge = 1;
    ibv_recv_wr* rbad = nullptr;
    CHECK(ibv_post_recv(p.s.id->qp, &rwr, &rbad) == 0);
    ibv_sge ssge{reinterpret_cast<uintptr_t>(p.c.buf.data()), 8, p.c.mr->lkey};
    ibv_send_wr inv{};
    inv.wr_id = 42;
    inv.opcode = IBV_WR_SEND_WITH_INV;
    inv.send_flags = IBV_SEND_SIGNALED;
    inv.sg_list = &ssge;
    inv.num_sge = 1;
    inv.invalidate_rkey = rkey;
    CHECK(ibv_post_send(p.c.id->qp, &inv, &bad) == 0);
    CHECK(next_wc(p.c.cq, &wc) && wc.wr_id == 42 && wc.status == IBV_WC_SUCCESS);
    CHECK(next_wc(p.s.cq, &wc) && wc.wr_id == 41 && wc.status == IBV_WC_SUCCESS && wc.opcode == IBV_WC_RECV);
    CHECK((wc.wc_flags & IBV_WC_WITH_INV) && wc.invalidated_rkey == rkey);
    // Invalidated: the region may go now, and the next Write places nothing.
    std::memset(p.c.buf.data(), 'Z', 64);
    CHECK(write_then_probe(p, base(p.s) + 512, rkey, 64) == IBV_WC_REM_ACCESS_ERR);
    CHECK(p.s.buf[512] == 'Y');
    CHECK(ibv_dealloc_mw(mw) == 0);
    close_probed_pair(p);
}

void input_case()
{
    Pair p;
    connect_pair(p);
    errno = 0;
    CHECK(ibv_alloc_mw(p.s.pd, static_cast<ibv_mw_type>(3)) == nullptr && errno == EINVAL);
    ibv_mw* mw2 = ibv_alloc_mw(p.s.pd, IBV_MW_TYPE_2);
    REQUIRE(mw2);
    ibv_mw_bind bind{};
    bind.send_flags = IBV_SEND_SIGNALED;
    bind.bind_info = {p.s.mr, base(p.s), 64, IBV_ACCESS_REMOTE_WRITE};
    CHECK(ibv_bind_mw(p.s.id->qp, mw2, &bind) == EINVAL);  // type 2 binds by work request
    ibv_mw* mw1 = ibv_alloc_mw(p.s.pd, IBV_MW_TYPE_1);
    REQUIRE(mw1);
    bind.bind_info.mw_access_flags |= IBV_ACCESS_ZERO_BASED;
    CHECK(ibv_bind_mw(p.s.id->qp, mw1, &bind) == EINVAL);
    // A region without MW_BIND (the probe): the bind fails at the send queue.
    bind.wr_id = 51;
    bind.bind_info = {p.s.probe, reinterpret_cast<uintptr_t>(p.s.probe_buf.data()), 64, IBV_ACCESS_REMOTE_READ};
    const uint32_t before = mw1->rkey;
    CHECK(ibv_bind_mw(p.s.id->qp, mw1, &bind) == 0);
    ibv_wc wc{};
    CHECK(next_wc(p.s.cq, &wc) && wc.wr_id == 51 && wc.status == IBV_WC_MW_BIND_ERR);
    mw1->rkey = before;  // the verbs contract: the application takes the key back
    CHECK(ibv_dealloc_mw(mw1) == 0);
    CHECK(ibv_dealloc_mw(mw2) == 0);
    close_probed_pair(p);
}

}  // namespace

int main()
{
    type1_case();
    type2_case();
    input_case();
    return iwemu::test::check_exit_status("verbs_mw", "all checks passed");
}
