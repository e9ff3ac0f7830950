// On-demand paging through the distro's libibverbs (issue 26; rdma-core's
// test_odp).  Each case connects a fresh pair of RC QPs over loopback
// through librdmacm, both ends in this process, and uses the server's
// implicit ODP region (addr NULL, length SIZE_MAX):
//   - a Write through it lands in mapped memory;
//   - a Write (small: copied from staging; large: received straight into
//     the target) or a Read aimed at memory that is not mapped fails at the
//     client with a remote access error (the server's Terminate), and the
//     process lives on;
//   - a Write gathered from an unmapped address under the client's own
//     implicit lkey completes with a local protection error, a Send into a
//     receive buffer there fails that receive the same way, and a Read
//     into a sink there;
//   - RFC 7306 atomics (fetch-and-add, compare-and-swap) on an explicit and
//     on the implicit ODP region, with the original value landing in an
//     ODP buffer; a target that is unmapped or read-only fails with a
//     remote access error, a result buffer in a hole with a local
//     protection error, and the process lives on;
//   - ibv_advise_mr's checks, the ODP capabilities, a parent domain,
//     ibv_resize_cq and ibv_query_rt_values_ex.
// Every wait is bounded.
#include <arpa/inet.h>
#include <infiniband/verbs.h>
#include <poll.h>
#include <rdma/rdma_cma.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
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
constexpr int kOdp = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ |
                     IBV_ACCESS_REMOTE_ATOMIC | IBV_ACCESS_ON_DEMAND;

using Pair = ProbedPair;
using Side = ProbedSide;

void connect_pair(Pair& p) { connect_probed_pair(p, {kRemote, {8, 8, 1, 1, 0}, kOdp}); }
uint64_t base(const Side& s) { return s.base(); }

// n pages, the upper half unmapped again: a hole right after mapped memory.
char* half_mapped(size_t pages)
{
    const size_t ps = static_cast<size_t>(sysconf(_SC_PAGESIZE));
    void* m = mmap(nullptr, pages * ps, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    REQUIRE(m != MAP_FAILED);
    char* c = static_cast<char*>(m);
    REQUIRE(munmap(c + pages / 2 * ps, pages / 2 * ps) == 0);
    return c;
}

void mapped_write_case()
{
    Pair p;
    connect_pair(p);
    std::memset(p.c.buf.data(), 'M', kBuf);
    CHECK(write_then_probe(p, base(p.s) + 100, p.s.implicit->rkey, 5000) == IBV_WC_SUCCESS);
    CHECK(p.s.buf[100] == 'M' && p.s.buf[5099] == 'M' && p.s.buf[5100] == 0);
    CHECK(write_then_probe(p, base(p.s), p.s.implicit->rkey, 64, IBV_WR_RDMA_READ) == IBV_WC_SUCCESS);
    close_probed_pair(p);
}

void unmapped_remote_case(uint32_t len, ibv_wr_opcode op)
{
    Pair p;
    connect_pair(p);
    const size_t ps = static_cast<size_t>(sysconf(_SC_PAGESIZE));
    char* mem = half_mapped(8);
    // Starts in mapped memory, ends in the hole (len > 1 page) or lies in it.
    const uint64_t target = reinterpret_cast<uintptr_t>(mem) + (len > ps ? 4 * ps - 64 : 5 * ps);
    std::memset(p.c.buf.data(), 'U', kBuf);
    CHECK(write_then_probe(p, target, p.s.implicit->rkey, len, op) == IBV_WC_REM_ACCESS_ERR);
    // The QP is in error now: the next WR is flushed, and nothing crashed.
    CHECK(write_then_probe(p, base(p.s), p.s.mr->rkey, 8) == IBV_WC_WR_FLUSH_ERR);
    ibv_qp_attr a{};
    ibv_qp_init_attr ia{};
    CHECK(ibv_query_qp(p.s.id->qp, &a, IBV_QP_STATE, &ia) == 0 && a.qp_state == IBV_QPS_ERR);
    munmap(mem, 4 * ps);
    close_probed_pair(p);
}

void unmapped_local_case()
{
    Pair p;
    connect_pair(p);
    const size_t ps = static_cast<size_t>(sysconf(_SC_PAGESIZE));
    char* mem = half_mapped(4);
    const int st = write_then_probe(p, base(p.s), p.s.mr->rkey, 64, IBV_WR_RDMA_WRITE, reinterpret_cast<uintptr_t>(mem) + 2 * ps + 8,
                         p.c.implicit->lkey);
    if (st != IBV_WC_LOC_PROT_ERR) std::fprintf(stderr, "local gather from a hole: status %d\n", st);
    CHECK(st == IBV_WC_LOC_PROT_ERR);
    CHECK(p.s.buf[0] == 0);
    munmap(mem, 2 * ps);
    close_probed_pair(p);
}

// A Send (small: staged copy; large: straight into the buffer) into a
// receive posted in unmapped memory under the server's implicit lkey: that
// receive completes with a local protection error, the client's next WR
// sees the Terminate.
void unmapped_receive_case(uint32_t len)
{
    Pair p;
    connect_pair(p);
    const size_t ps = static_cast<size_t>(sysconf(_SC_PAGESIZE));
    char* mem = half_mapped(8);
    // Large: starts in mapped memory and runs into the hole; small: in it.
    const uint64_t at = reinterpret_cast<uintptr_t>(mem) + (len > ps ? 4 * ps - 64 : 5 * ps);
    ibv_sge rs{at, len, p.s.implicit->lkey};
    ibv_recv_wr rw{};
    rw.wr_id = 99;
    rw.sg_list = &rs;
    rw.num_sge = 1;
    ibv_recv_wr* rbad = nullptr;
    REQUIRE(ibv_post_recv(p.s.id->qp, &rw, &rbad) == 0);
    std::memset(p.c.buf.data(), 'R', kBuf);
    CHECK(write_then_probe(p, 0, 0, len, IBV_WR_SEND) != IBV_WC_SUCCESS);
    ibv_wc wc{};
    int n = 0;
    for (int ms = 0; ms < kTimeoutMs && n == 0; ++ms) {
        n = ibv_poll_cq(p.s.cq, 1, &wc);
        if (n == 0) poll(nullptr, 0, 1);
    }
    if (n != 1 || wc.status != IBV_WC_LOC_PROT_ERR)
        std::fprintf(stderr, "receive of %u into a hole: n %d status %d\n", len, n, n == 1 ? wc.status : -1);
    CHECK(n == 1 && wc.wr_id == 99 && wc.status == IBV_WC_LOC_PROT_ERR);
    munmap(mem, 4 * ps);
    close_probed_pair(p);
}

// A Read whose sink lies in unmapped memory under the client's implicit
// lkey: the Read completes with a local protection error.
void unmapped_read_sink_case()
{
    Pair p;
    connect_pair(p);
    const size_t ps = static_cast<size_t>(sysconf(_SC_PAGESIZE));
    char* mem = half_mapped(4);
    const int st = write_then_probe(p, base(p.s), p.s.implicit->rkey, 64, IBV_WR_RDMA_READ,
                         reinterpret_cast<uintptr_t>(mem) + 2 * ps, p.c.implicit->lkey);
    if (st != IBV_WC_LOC_PROT_ERR) std::fprintf(stderr, "Read into a hole: status %d\n", st);
    CHECK(st == IBV_WC_LOC_PROT_ERR);
    munmap(mem, 2 * ps);
    close_probed_pair(p);
}

// Atomics through ODP regions: the target word in an explicit ODP MR and
// under the implicit one, the original value into the client's implicit
// region (fault-safe placement).
void odp_atomic_case()
{
    Pair p;
    connect_pair(p);
    const size_t ps = static_cast<size_t>(sysconf(_SC_PAGESIZE));
    char* target = half_mapped(4);  // pages 0-1 mapped, 2-3 a hole
    ibv_mr* explicit_odp = ibv_reg_mr(p.s.pd, target, 4 * ps, kOdp);
    REQUIRE(explicit_odp);
    auto* word = reinterpret_cast<uint64_t*>(target + 64);
    *word = 5;
    uint64_t result[2] = {~uint64_t{0}, ~uint64_t{0}};
    const auto res = reinterpret_cast<uintptr_t>(&result[0]);
    const uint64_t at = reinterpret_cast<uintptr_t>(word);
    CHECK(write_then_probe(p, at, explicit_odp->rkey, 8, IBV_WR_ATOMIC_FETCH_AND_ADD, res, p.c.implicit->lkey, 3) ==
          IBV_WC_SUCCESS);
    CHECK(result[0] == 5 && *word == 8);
    CHECK(write_then_probe(p, at, p.s.implicit->rkey, 8, IBV_WR_ATOMIC_CMP_AND_SWP, res, p.c.implicit->lkey, 8, 42) ==
          IBV_WC_SUCCESS);
    CHECK(result[0] == 8 && *word == 42);
    CHECK(write_then_probe(p, at, p.s.implicit->rkey, 8, IBV_WR_ATOMIC_CMP_AND_SWP, res, p.c.implicit->lkey, 7, 1) ==
          IBV_WC_SUCCESS);
    CHECK(result[0] == 42 && *word == 42);  // compare failed: unchanged
    // A word on a page that was never touched is faulted in for write.
    CHECK(write_then_probe(p, at + ps, explicit_odp->rkey, 8, IBV_WR_ATOMIC_FETCH_AND_ADD, res, p.c.implicit->lkey, 9) ==
          IBV_WC_SUCCESS);
    CHECK(result[0] == 0 && *reinterpret_cast<uint64_t*>(target + 64 + ps) == 9);
    CHECK(ibv_dereg_mr(explicit_odp) == 0);
    close_probed_pair(p);

    // The target in the hole: the server's Terminate, a remote access error.
    Pair q;
    connect_pair(q);
    CHECK(write_then_probe(q, reinterpret_cast<uintptr_t>(target) + 2 * ps + 8, q.s.implicit->rkey, 8,
                IBV_WR_ATOMIC_FETCH_AND_ADD, res, q.c.implicit->lkey, 1) == IBV_WC_REM_ACCESS_ERR);
    CHECK(write_then_probe(q, base(q.s), q.s.mr->rkey, 8) == IBV_WC_WR_FLUSH_ERR);
    close_probed_pair(q);

    // A read-only target: readable is not enough for an atomic.
    Pair r;
    connect_pair(r);
    REQUIRE(mprotect(target, ps, PROT_READ) == 0);
    CHECK(write_then_probe(r, at, r.s.implicit->rkey, 8, IBV_WR_ATOMIC_CMP_AND_SWP, res, r.c.implicit->lkey, 42, 1) ==
          IBV_WC_REM_ACCESS_ERR);
    CHECK(*word == 42);
    close_probed_pair(r);

    // The original value's buffer in a hole under the client's implicit
    // lkey: a local protection error; the target did change (the responder
    // performed it), as an RNIC's would.
    Pair l;
    connect_pair(l);
    REQUIRE(mprotect(target, ps, PROT_READ | PROT_WRITE) == 0);
    const int st = write_then_probe(l, at, l.s.implicit->rkey, 8, IBV_WR_ATOMIC_FETCH_AND_ADD,
                         reinterpret_cast<uintptr_t>(target) + 3 * ps, l.c.implicit->lkey, 1);
    if (st != IBV_WC_LOC_PROT_ERR) std::fprintf(stderr, "atomic result into a hole: status %d\n", st);
    CHECK(st == IBV_WC_LOC_PROT_ERR);
    close_probed_pair(l);
    munmap(target, 2 * ps);
}

void api_case()
{
    Pair p;
    connect_pair(p);
    ibv_context* ctx = p.s.id->verbs;
    ibv_device_attr_ex dx{};
    CHECK(ibv_query_device_ex(ctx, nullptr, &dx) == 0);
    CHECK((dx.odp_caps.general_caps & (IBV_ODP_SUPPORT | IBV_ODP_SUPPORT_IMPLICIT)) ==
          (IBV_ODP_SUPPORT | IBV_ODP_SUPPORT_IMPLICIT));
    const uint32_t rc = IBV_ODP_SUPPORT_SEND | IBV_ODP_SUPPORT_RECV | IBV_ODP_SUPPORT_WRITE | IBV_ODP_SUPPORT_READ |
                        IBV_ODP_SUPPORT_ATOMIC;
    CHECK((dx.odp_caps.per_transport_caps.rc_odp_caps & rc) == rc);
    CHECK(dx.hca_core_clock != 0);
    // Implicit ODP needs ON_DEMAND.
    CHECK(ibv_reg_mr(p.s.pd, nullptr, SIZE_MAX, IBV_ACCESS_LOCAL_WRITE) == nullptr);

    // ibv_advise_mr
    const size_t ps = static_cast<size_t>(sysconf(_SC_PAGESIZE));
    char* mem = half_mapped(4);
    ibv_sge ok{reinterpret_cast<uintptr_t>(mem), static_cast<uint32_t>(2 * ps), p.s.implicit->lkey};
    ibv_sge hole{reinterpret_cast<uintptr_t>(mem) + ps, static_cast<uint32_t>(2 * ps), p.s.implicit->lkey};
    ibv_sge bad_key{reinterpret_cast<uintptr_t>(mem), 8, p.s.implicit->lkey ^ 0x5a};
    ibv_sge not_odp{base(p.s), 8, p.s.mr->lkey};
    CHECK(ibv_advise_mr(p.s.pd, IBV_ADVISE_MR_ADVICE_PREFETCH_WRITE, IBV_ADVISE_MR_FLAG_FLUSH, &ok, 1) == 0);
    CHECK(ibv_advise_mr(p.s.pd, IBV_ADVISE_MR_ADVICE_PREFETCH, IBV_ADVISE_MR_FLAG_FLUSH, &hole, 1) == EFAULT);
    CHECK(ibv_advise_mr(p.s.pd, IBV_ADVISE_MR_ADVICE_PREFETCH, 0, &hole, 1) == 0);  // asynchronous: dropped
    CHECK(ibv_advise_mr(p.s.pd, IBV_ADVISE_MR_ADVICE_PREFETCH, 0, &bad_key, 1) == ENOENT);
    CHECK(ibv_advise_mr(p.s.pd, IBV_ADVISE_MR_ADVICE_PREFETCH, 0, &not_odp, 1) == EINVAL);
    CHECK(ibv_advise_mr(p.s.pd, IBV_ADVISE_MR_ADVICE_PREFETCH, 0, &ok, 0) == EINVAL);
    // 3: no advice, yet inside the enum's range (UBSan checks the load in verbs.h).
    CHECK(ibv_advise_mr(p.s.pd, static_cast<ibv_advise_mr_advice>(3), 0, &ok, 1) == EOPNOTSUPP);
    CHECK(ibv_advise_mr(p.s.pd, IBV_ADVISE_MR_ADVICE_PREFETCH, 2, &ok, 1) == EINVAL);
    munmap(mem, 2 * ps);

    // Parent domain: usable as its PD; the PD cannot go while it exists.
    ibv_pd* pd = ibv_alloc_pd(ctx);
    REQUIRE(pd);
    ibv_td_init_attr ta{};
    ibv_td* td = ibv_alloc_td(ctx, &ta);
    CHECK(td != nullptr);
    ibv_parent_domain_init_attr pa{};
    pa.pd = pd;
    pa.td = td;
    ibv_pd* parent = ibv_alloc_parent_domain(ctx, &pa);
    REQUIRE(parent);
    pa.comp_mask = 1u << 7;
    CHECK(ibv_alloc_parent_domain(ctx, &pa) == nullptr && errno == EINVAL);
    ibv_mr* mr = ibv_reg_mr(parent, p.s.buf.data(), 64, IBV_ACCESS_LOCAL_WRITE);
    CHECK(mr != nullptr);
    ibv_cq_init_attr_ex ca{};
    ca.cqe = 4;
    ca.comp_mask = IBV_CQ_INIT_ATTR_MASK_PD;
    ca.parent_domain = parent;
    ibv_cq_ex* cq = ibv_create_cq_ex(ctx, &ca);
    CHECK(cq != nullptr);
    ca.parent_domain = pd;  // a plain PD is not a parent domain
    CHECK(ibv_create_cq_ex(ctx, &ca) == nullptr && errno == EINVAL);
    errno = 0;
    CHECK(ibv_dealloc_pd(pd) == EBUSY && errno == EBUSY);
    CHECK(ibv_dealloc_td(td) == EBUSY);
    if (cq) CHECK(ibv_destroy_cq(ibv_cq_ex_to_cq(cq)) == 0);
    if (mr) CHECK(ibv_dereg_mr(mr) == 0);
    CHECK(ibv_dealloc_pd(parent) == 0);
    CHECK(ibv_dealloc_td(td) == 0);
    CHECK(ibv_dealloc_pd(pd) == 0);

    // ibv_resize_cq through libibverbs.
    ibv_cq* rcq = ibv_create_cq(ctx, 4, nullptr, nullptr, 0);
    REQUIRE(rcq);
    CHECK(ibv_resize_cq(rcq, 64) == 0 && rcq->cqe == 64);
    CHECK(ibv_resize_cq(rcq, 0) == EINVAL);
    CHECK(ibv_resize_cq(rcq, static_cast<int>(dx.orig_attr.max_cqe) + 1) == EINVAL);
    CHECK(ibv_resize_cq(rcq, 2) == 0 && rcq->cqe == 2);
    CHECK(ibv_destroy_cq(rcq) == 0);

    // ibv_query_rt_values_ex: a clock that moves forward.
    ibv_values_ex v1{}, v2{};
    v1.comp_mask = v2.comp_mask = IBV_VALUES_MASK_RAW_CLOCK;
    CHECK(ibv_query_rt_values_ex(ctx, &v1) == 0 && v1.comp_mask == IBV_VALUES_MASK_RAW_CLOCK);
    usleep(1000);
    CHECK(ibv_query_rt_values_ex(ctx, &v2) == 0);
    CHECK(v2.raw_clock.tv_nsec - v1.raw_clock.tv_nsec >= 1000000);
    close_probed_pair(p);
}

}  // namespace

int main()
{
    mapped_write_case();
    unmapped_remote_case(64, IBV_WR_RDMA_WRITE);
    unmapped_remote_case(16 * 1024, IBV_WR_RDMA_WRITE);
    unmapped_remote_case(64, IBV_WR_RDMA_READ);
    unmapped_local_case();
    unmapped_receive_case(64);
    unmapped_receive_case(12 * 1024);
    unmapped_read_sink_case();
    odp_atomic_case();
    api_case();
    return iwemu::test::check_exit_status("verbs_odp", "all checks passed");
}
