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
#include "probed_pair.h"

namespace {

using namespace iwemu::test;
constexpr int kTimeoutMs = kPairTimeoutMs;
constexpr size_t kBuf = kPairBuf;

constexpr int kRemote = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE;

using Pair = ProbedPair;
using Side = ProbedSide;

void connect_pair(Pair& p) { connect_probed_pair(p, {kRemote, {8, 8, 1, 1, 0}}); }
uint64_t base(const Side& s) { return s.base(); }

void access_case()
{
    Pair p;
    connect_pair(p);
    const uint32_t lkey = p.s.mr->lkey, rkey = p.s.mr->rkey;
    std::memset(p.c.buf.data(), 'A', 64);
    CHECK(write_then_probe(p, base(p.s), rkey, 64) == IBV_WC_SUCCESS);
    CHECK(p.s.buf[63] == 'A');

    // Same rights again: a no-op that keeps the keys.
    CHECK(ibv_rereg_mr(p.s.mr, IBV_REREG_MR_CHANGE_ACCESS, nullptr, nullptr, 0, kRemote) == 0);
    CHECK(p.s.mr->lkey == lkey && p.s.mr->rkey == rkey);
    std::memset(p.c.buf.data(), 'B', 64);
    CHECK(write_then_probe(p, base(p.s), rkey, 64) == IBV_WC_SUCCESS);
    CHECK(p.s.buf[0] == 'B');

    // Remote write taken away: the old rkey no longer writes.
    CHECK(ibv_rereg_mr(p.s.mr, IBV_REREG_MR_CHANGE_ACCESS, nullptr, nullptr, 0, IBV_ACCESS_LOCAL_WRITE) == 0);
    CHECK(p.s.mr->lkey == lkey && p.s.mr->rkey == rkey);
    std::memset(p.c.buf.data(), 'C', 64);
    CHECK(write_then_probe(p, base(p.s), rkey, 64) == IBV_WC_REM_ACCESS_ERR);
    CHECK(p.s.buf[0] == 'B');
    close_probed_pair(p);
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
    CHECK(write_then_probe(p, reinterpret_cast<uintptr_t>(other.data()) + 64, rkey, 128) == IBV_WC_SUCCESS);
    CHECK(other[64] == 'T' && other[191] == 'T' && p.s.buf[64] != 'T');
    // The old buffer is outside the region now.
    CHECK(write_then_probe(p, base(p.s) + kBuf - 256, rkey, 128) != IBV_WC_SUCCESS);
    close_probed_pair(p);
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
    CHECK(write_then_probe(p, base(p.s), rkey, 32) == IBV_WC_SUCCESS);
    CHECK(p.s.buf[31] == 'P');
    CHECK(ibv_rereg_mr(p.s.mr, IBV_REREG_MR_CHANGE_PD, other, nullptr, 0, 0) == 0);
    std::memset(p.c.buf.data(), 'Q', 32);
    CHECK(write_then_probe(p, base(p.s), rkey, 32) != IBV_WC_SUCCESS);
    CHECK(p.s.buf[0] == 'P');
    CHECK(ibv_rereg_mr(p.s.mr, IBV_REREG_MR_CHANGE_PD, p.s.pd, nullptr, 0, 0) == 0);
    CHECK(ibv_dealloc_pd(other) == 0);
    close_probed_pair(p);
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
    CHECK(write_then_probe(p, base(p.s), mr->rkey, 16) == IBV_WC_SUCCESS);
    CHECK(p.s.buf[15] == 'I');
    close_probed_pair(p);
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
