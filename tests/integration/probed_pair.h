// Two RC QPs of this process connected over loopback through librdmacm,
// for tests that ask whether a client's Write landed at the server (memory
// windows, rereg, ODP).  Each side has a buffer region with the rights the
// test chooses and a small "probe" region the peer may Read.
//
// A Write completes at the client once TCP took it; a Read of the server's
// probe posted behind it completes only after the server has handled the
// Write (RDMAP orders them), so write_then_probe() reports whether the
// Write was placed: success, or the status of the first failure.
// Every wait is bounded.
#pragma once

#include <infiniband/verbs.h>
#include <poll.h>

#include <cstdint>
#include <cstdio>
#include <vector>

#include "check.h"
#include "cm_loopback.h"
#include "rc_qp_attr.h"

namespace iwemu::test {

constexpr int kPairTimeoutMs = kCmTimeoutMs;
constexpr size_t kPairBuf = 1 << 14;

struct ProbedPairSpec {
    int buf_access;             // the rights of each side's buffer region
    ibv_qp_cap cap;
    int implicit_odp_access = 0;  // nonzero: also an implicit ODP region (addr NULL, SIZE_MAX)
};

struct ProbedSide {
    rdma_cm_id* id = nullptr;
    ibv_pd* pd = nullptr;
    ibv_cq* cq = nullptr;
    ibv_mr* mr = nullptr;
    ibv_mr* probe = nullptr;     // what the peer Reads after each Write
    ibv_mr* implicit = nullptr;  // ProbedPairSpec::implicit_odp_access
    std::vector<char> buf = std::vector<char>(kPairBuf);
    std::vector<char> probe_buf = std::vector<char>(64);
    uint64_t base() const { return reinterpret_cast<uintptr_t>(buf.data()); }
};

struct ProbedPair {
    rdma_event_channel* ech_s = nullptr;
    rdma_event_channel* ech_c = nullptr;
    rdma_cm_id* listen_id = nullptr;
    ProbedSide c, s;
};

inline void setup_probed_side(ProbedSide& s, rdma_cm_id* id, const ProbedPairSpec& spec)
{
    s.id = id;
    s.pd = ibv_alloc_pd(id->verbs);
    REQUIRE(s.pd);
    s.cq = ibv_create_cq(id->verbs, 16, nullptr, nullptr, 0);
    REQUIRE(s.cq);
    s.mr = ibv_reg_mr(s.pd, s.buf.data(), s.buf.size(), spec.buf_access);
    REQUIRE(s.mr);
    s.probe = ibv_reg_mr(s.pd, s.probe_buf.data(), s.probe_buf.size(),
                         IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_READ);
    REQUIRE(s.probe);
    if (spec.implicit_odp_access) {
        s.implicit = ibv_reg_mr(s.pd, nullptr, SIZE_MAX, spec.implicit_odp_access);
        REQUIRE(s.implicit);
    }
    ibv_qp_init_attr ia = rc_qp_attr(s.cq, spec.cap);
    REQUIRE(rdma_create_qp(id, s.pd, &ia) == 0);
}

inline void connect_probed_pair(ProbedPair& p, const ProbedPairSpec& spec)
{
    CmLoopback l = cm_loopback_resolved();
    p.ech_s = l.ech_s;
    p.ech_c = l.ech_c;
    p.listen_id = l.listen_id;
    setup_probed_side(p.c, l.client, spec);
    rdma_conn_param cp = cm_conn_param();
    rdma_cm_id* sid = cm_loopback_connect(l, cp);
    setup_probed_side(p.s, sid, spec);
    cm_loopback_accept(l, sid, cp);
}

inline void close_probed_pair(ProbedPair& p)
{
    rdma_disconnect(p.c.id);
    for (ProbedSide* side : {&p.c, &p.s}) {
        rdma_destroy_qp(side->id);
        CHECK(ibv_dereg_mr(side->mr) == 0);
        CHECK(ibv_dereg_mr(side->probe) == 0);
        if (side->implicit) CHECK(ibv_dereg_mr(side->implicit) == 0);
        CHECK(ibv_destroy_cq(side->cq) == 0);
        CHECK(ibv_dealloc_pd(side->pd) == 0);
        CHECK(rdma_destroy_id(side->id) == 0);
    }
    cm_loopback_release({p.ech_s, p.ech_c, p.listen_id, nullptr});
}

// `op` (a Write, or a Read into the client's buffer) of `len` octets at
// `remote` under `rkey` -- from/to the client's buffer, or `local` under
// `lkey` -- then the Read of the server's probe.  Returns the first status
// that is not success (-1: no completion within the bound).  An atomic
// (op IBV_WR_ATOMIC_*, len 8) takes compare_add and swap.
inline int write_then_probe(ProbedPair& p, uint64_t remote, uint32_t rkey, uint32_t len,
                            ibv_wr_opcode op = IBV_WR_RDMA_WRITE, uint64_t local = 0, uint32_t lkey = 0,
                            uint64_t compare_add = 0, uint64_t swap = 0)
{
    if (!local) {
        local = p.c.base();
        lkey = p.c.mr->lkey;
    }
    ibv_sge sge[2] = {{local, len, lkey}, {p.c.base() + kPairBuf - 8, 8, p.c.mr->lkey}};
    ibv_send_wr wr[2] = {};
    wr[0].wr_id = 7;
    wr[0].opcode = op;
    wr[0].sg_list = &sge[0];
    wr[0].num_sge = 1;
    wr[0].send_flags = IBV_SEND_SIGNALED;
    wr[0].wr.rdma.remote_addr = remote;
    wr[0].wr.rdma.rkey = rkey;
    if (op == IBV_WR_ATOMIC_FETCH_AND_ADD || op == IBV_WR_ATOMIC_CMP_AND_SWP)
        wr[0].wr.atomic = {remote, compare_add, swap, rkey};
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
    for (int ms = 0; ms < kPairTimeoutMs && got < 2; ++ms) {
        ibv_wc wc{};
        const int n = ibv_poll_cq(p.c.cq, 1, &wc);
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

}  // namespace iwemu::test
