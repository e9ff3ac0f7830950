// Sharing verbs objects between contexts through the distro's libibverbs
// (issue 26; rdma-core's test_shared_pd): ibv_import_device on copies of a
// context's cmd fd, ibv_import_pd / ibv_import_mr by handle, traffic on QPs
// created on the imported PD through the imported MR's keys, the unimports,
// and the lifetimes:
//   - dup, dup2, dup3 and fcntl(F_DUPFD_CLOEXEC) copies of the cmd fd are
//     character devices with uverbs0's number (231:192), importable; closing
//     one copy leaves the others and the original working;
//   - an fd of something else is refused (EINVAL for a pipe, ENODEV for
//     another character device); unknown PD / MR handles are ENOENT;
//   - unimport frees only the view: the owner's objects keep working and
//     are destroyed by the owner afterwards;
//   - the original context closed first: its objects stay for the imported
//     context (the file lives on) and go when that one is closed;
//   - ibv_dereg_mr / ibv_dealloc_pd through a view destroy the shared
//     object; the owner's struct then answers EINVAL; a parent domain on a
//     view keeps working after the view's unimport.
// Every wait is bounded.
#include <fcntl.h>
#include <infiniband/verbs.h>
#include <poll.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <vector>

#include "check.h"
#include "rc_qp_attr.h"

namespace {

constexpr int kTimeoutMs = 5000;
constexpr size_t kBuf = 1 << 16;
constexpr int kAccess = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ;

ibv_context* open_iwemu()
{
    int n = 0;
    ibv_device** list = ibv_get_device_list(&n);
    REQUIRE(list && n >= 1);
    ibv_context* ctx = nullptr;
    for (int i = 0; i < n && !ctx; ++i)
        if (std::strcmp(ibv_get_device_name(list[i]), "iwemu0") == 0) ctx = ibv_open_device(list[i]);
    ibv_free_device_list(list);
    REQUIRE(ctx);
    return ctx;
}

struct Qp {
    ibv_cq* cq = nullptr;
    ibv_qp* qp = nullptr;
};

Qp make_qp(ibv_context* ctx, ibv_pd* pd)
{
    Qp q;
    q.cq = ibv_create_cq(ctx, 32, nullptr, nullptr, 0);
    REQUIRE(q.cq);
    ibv_qp_init_attr ia = iwemu::test::rc_qp_attr(q.cq, {8, 8, 1, 1, 0});
    q.qp = ibv_create_qp(pd, &ia);
    REQUIRE(q.qp);
    ibv_qp_attr a{};
    a.qp_state = IBV_QPS_INIT;
    a.port_num = 1;
    a.qp_access_flags = kAccess;
    REQUIRE(ibv_modify_qp(q.qp, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS) == 0);
    return q;
}

void connect(Qp& q, const ibv_gid& gid, uint32_t dest_qpn)
{
    ibv_qp_attr a{};
    a.qp_state = IBV_QPS_RTR;
    a.path_mtu = IBV_MTU_1024;
    a.dest_qp_num = dest_qpn;
    a.max_dest_rd_atomic = 1;
    a.min_rnr_timer = 12;
    a.ah_attr.is_global = 1;
    a.ah_attr.grh.dgid = gid;
    a.ah_attr.grh.hop_limit = 0xFF;
    a.ah_attr.port_num = 1;
    REQUIRE(ibv_modify_qp(q.qp, &a,
                          IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN |
                              IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER) == 0);
}

void to_rts(Qp& q)
{
    ibv_qp_attr a{};
    a.qp_state = IBV_QPS_RTS;
    a.timeout = 14;
    a.retry_cnt = 7;
    a.rnr_retry = 7;
    a.max_rd_atomic = 1;
    REQUIRE(ibv_modify_qp(q.qp, &a,
                          IBV_QP_STATE | IBV_QP_SQ_PSN | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY |
                              IBV_QP_MAX_QP_RD_ATOMIC) == 0);
}

void destroy(Qp& q)
{
    CHECK(ibv_destroy_qp(q.qp) == 0);
    CHECK(ibv_destroy_cq(q.cq) == 0);
}

// One completion on cq within the bound: its status, or -1.
int wait_wc(ibv_cq* cq, uint64_t* wr_id = nullptr, uint32_t* byte_len = nullptr)
{
    for (int ms = 0; ms < kTimeoutMs; ++ms) {
        ibv_wc wc{};
        int n = ibv_poll_cq(cq, 1, &wc);
        if (n < 0) return -1;
        if (n == 1) {
            if (wr_id) *wr_id = wc.wr_id;
            if (byte_len) *byte_len = wc.byte_len;
            return wc.status;
        }
        poll(nullptr, 0, 1);
    }
    return -1;
}

int post(ibv_qp* qp, ibv_wr_opcode op, void* local, uint32_t len, uint32_t lkey, uint64_t remote = 0,
         uint32_t rkey = 0)
{
    ibv_sge sge{reinterpret_cast<uintptr_t>(local), len, lkey};
    ibv_send_wr wr{};
    wr.wr_id = op;
    wr.opcode = op;
    wr.sg_list = &sge;
    wr.num_sge = 1;
    wr.send_flags = IBV_SEND_SIGNALED;
    wr.wr.rdma.remote_addr = remote;
    wr.wr.rdma.rkey = rkey;
    ibv_send_wr* bad = nullptr;
    return ibv_post_send(qp, &wr, &bad);
}

void fd_copies_case()
{
    ibv_context* ctx = open_iwemu();
    struct stat st{};
    REQUIRE(fstat(ctx->cmd_fd, &st) == 0);
    CHECK(S_ISCHR(st.st_mode) && st.st_rdev == makedev(231, 192));

    const int d1 = dup(ctx->cmd_fd);
    const int d2 = fcntl(ctx->cmd_fd, F_DUPFD_CLOEXEC, 200);
    const int d3 = dup2(ctx->cmd_fd, 300);
    const int d4 = dup3(ctx->cmd_fd, 301, O_CLOEXEC);
    REQUIRE(d1 >= 0 && d2 >= 200 && d3 == 300 && d4 == 301);
    for (int fd : {d1, d2, d3, d4}) {
        struct stat s{};
        CHECK(fstat(fd, &s) == 0 && S_ISCHR(s.st_mode) && s.st_rdev == st.st_rdev);
    }
    CHECK((fcntl(d2, F_GETFD) & FD_CLOEXEC) != 0);

    // Each copy is its own: closing some leaves the rest, and the original.
    CHECK(close(d1) == 0);
    CHECK(close(d3) == 0);
    struct stat s{};
    CHECK(fstat(d2, &s) == 0 && s.st_rdev == st.st_rdev);
    CHECK(fstat(ctx->cmd_fd, &s) == 0 && s.st_rdev == st.st_rdev);
    // A number reused by something else is that thing again.
    int p[2];
    REQUIRE(pipe(p) == 0);
    CHECK(dup2(p[0], d4) == d4);
    CHECK(fstat(d4, &s) == 0 && S_ISFIFO(s.st_mode));
    ibv_pd* pd = ibv_alloc_pd(ctx);
    CHECK(pd != nullptr);

    // Imports: through one copy; the other copy still imports afterwards.
    ibv_context* a = ibv_import_device(d2);
    REQUIRE(a);
    CHECK(a->cmd_fd == d2 && a->async_fd >= 0 && a->device == ctx->device);
    ibv_device_attr attr{};
    CHECK(ibv_query_device(a, &attr) == 0 && attr.max_qp > 0);
    const int d5 = dup(ctx->cmd_fd);
    ibv_context* b = ibv_import_device(d5);
    CHECK(b != nullptr);
    ibv_pd* ipd = ibv_import_pd(a, pd->handle);
    CHECK(ipd != nullptr);
    if (ipd) ibv_unimport_pd(ipd);
    if (b) CHECK(ibv_close_device(b) == 0);  // closes d5
    CHECK(ibv_close_device(a) == 0);         // closes d2
    CHECK(fstat(ctx->cmd_fd, &s) == 0 && s.st_rdev == st.st_rdev);
    CHECK(ibv_dealloc_pd(pd) == 0);

    // Not a uverbs fd.
    errno = 0;
    CHECK(ibv_import_device(p[1]) == nullptr && errno == EINVAL);
    const int null_fd = open("/dev/null", O_RDWR);
    errno = 0;
    CHECK(ibv_import_device(null_fd) == nullptr && errno == ENODEV);
    close(null_fd);
    close(p[0]);
    close(p[1]);
    close(d4);
    CHECK(ibv_close_device(ctx) == 0);
}

// Traffic on QPs built on an imported PD through an imported MR's keys;
// the owner (another context on the same file) registered the memory.
void traffic_case()
{
    ibv_context* owner = open_iwemu();
    ibv_pd* pd = ibv_alloc_pd(owner);
    REQUIRE(pd);
    std::vector<char> shared(kBuf, 'o');
    ibv_mr* mr = ibv_reg_mr(pd, shared.data(), kBuf, kAccess);
    REQUIRE(mr);

    ibv_context* imp = ibv_import_device(dup(owner->cmd_fd));
    REQUIRE(imp);
    ibv_pd* ipd = ibv_import_pd(imp, pd->handle);
    REQUIRE(ipd);
    CHECK(ipd->handle == pd->handle && ipd->context == imp);
    errno = 0;
    CHECK(ibv_import_pd(imp, pd->handle + 1000) == nullptr && errno == ENOENT);
    ibv_mr* imr = ibv_import_mr(ipd, mr->handle);
    REQUIRE(imr);
    CHECK(imr->lkey == mr->lkey && imr->rkey == mr->rkey && imr->length == kBuf && imr->addr == nullptr);
    CHECK(imr->pd == ipd && imr->context == imp && imr->handle == mr->handle);
    errno = 0;
    CHECK(ibv_import_mr(ipd, mr->handle ^ 0x5a5a00) == nullptr && errno == ENOENT);

    // The peer: a context of its own.
    ibv_context* peer = open_iwemu();
    ibv_pd* ppd = ibv_alloc_pd(peer);
    REQUIRE(ppd);
    std::vector<char> pbuf(kBuf, 'p');
    ibv_mr* pmr = ibv_reg_mr(ppd, pbuf.data(), kBuf, kAccess);
    REQUIRE(pmr);

    Qp a = make_qp(imp, ipd);
    Qp b = make_qp(peer, ppd);
    ibv_gid gid{};
    REQUIRE(ibv_query_gid(imp, 1, 0, &gid) == 0);
    connect(a, gid, b.qp->qp_num);
    connect(b, gid, a.qp->qp_num);
    to_rts(a);
    to_rts(b);

    // The peer Writes into the owner's memory under the imported rkey and
    // Reads it back (the Read Response leaves after the Write was placed).
    std::memset(pbuf.data(), 'W', 4096);
    CHECK(post(b.qp, IBV_WR_RDMA_WRITE, pbuf.data(), 4096, pmr->lkey,
               reinterpret_cast<uintptr_t>(shared.data()) + 100, imr->rkey) == 0);
    CHECK(wait_wc(b.cq) == IBV_WC_SUCCESS);
    CHECK(post(b.qp, IBV_WR_RDMA_READ, pbuf.data() + 8192, 4096, pmr->lkey,
               reinterpret_cast<uintptr_t>(shared.data()) + 100, imr->rkey) == 0);
    CHECK(wait_wc(b.cq) == IBV_WC_SUCCESS);
    CHECK(shared[99] == 'o' && shared[100] == 'W' && shared[4195] == 'W' && shared[4196] == 'o');
    CHECK(pbuf[8192] == 'W' && pbuf[8192 + 4095] == 'W');

    // The imported side Sends from the owner's memory under the imported lkey.
    ibv_sge rs{reinterpret_cast<uintptr_t>(pbuf.data() + 16384), 1024, pmr->lkey};
    ibv_recv_wr rw{};
    rw.wr_id = 55;
    rw.sg_list = &rs;
    rw.num_sge = 1;
    ibv_recv_wr* rbad = nullptr;
    REQUIRE(ibv_post_recv(b.qp, &rw, &rbad) == 0);
    CHECK(post(a.qp, IBV_WR_SEND, shared.data() + 100, 512, imr->lkey) == 0);
    CHECK(wait_wc(a.cq) == IBV_WC_SUCCESS);
    uint64_t id = 0;
    uint32_t len = 0;
    CHECK(wait_wc(b.cq, &id, &len) == IBV_WC_SUCCESS && id == 55 && len == 512);
    CHECK(pbuf[16384] == 'W' && pbuf[16384 + 511] == 'W' && pbuf[16384 + 512] == 'p');

    // Unimport frees the views only: the owner's MR still serves a Read.
    destroy(a);
    ibv_unimport_mr(imr);
    ibv_unimport_pd(ipd);
    Qp c = make_qp(owner, pd);
    Qp d = make_qp(peer, ppd);
    connect(c, gid, d.qp->qp_num);
    connect(d, gid, c.qp->qp_num);
    to_rts(c);
    to_rts(d);
    CHECK(post(d.qp, IBV_WR_RDMA_READ, pbuf.data() + 32768, 64, pmr->lkey,
               reinterpret_cast<uintptr_t>(shared.data()) + 100, mr->rkey) == 0);
    CHECK(wait_wc(d.cq) == IBV_WC_SUCCESS && pbuf[32768] == 'W');
    destroy(c);
    destroy(d);
    destroy(b);
    CHECK(ibv_close_device(imp) == 0);
    // ... and the owner destroys them afterwards.
    CHECK(ibv_dereg_mr(mr) == 0);
    CHECK(ibv_dealloc_pd(pd) == 0);
    CHECK(ibv_dereg_mr(pmr) == 0);
    CHECK(ibv_dealloc_pd(ppd) == 0);
    CHECK(ibv_close_device(peer) == 0);
    CHECK(ibv_close_device(owner) == 0);
}

// The original context closed first; destroys through views.
void lifetime_case()
{
    ibv_context* owner = open_iwemu();
    ibv_pd* pd = ibv_alloc_pd(owner);
    REQUIRE(pd);
    std::vector<char> mem(4096);
    ibv_mr* mr = ibv_reg_mr(pd, mem.data(), mem.size(), kAccess);
    REQUIRE(mr);
    ibv_mr* mr2 = ibv_reg_mr(pd, mem.data(), mem.size(), IBV_ACCESS_LOCAL_WRITE);
    REQUIRE(mr2);
    const uint32_t pd_handle = pd->handle, mr_handle = mr->handle, mr_rkey = mr->rkey;
    ibv_context* imp = ibv_import_device(dup(owner->cmd_fd));
    REQUIRE(imp);

    // Dereg through a view: the owner's struct then answers EINVAL, and a
    // second view of the same MR is left naming nothing either.
    ibv_pd* v = ibv_import_pd(imp, pd_handle);
    REQUIRE(v);
    ibv_mr* m2a = ibv_import_mr(v, mr2->handle);
    ibv_mr* m2b = ibv_import_mr(v, mr2->handle);
    REQUIRE(m2a && m2b);
    CHECK(ibv_dereg_mr(m2a) == 0);
    CHECK(ibv_dereg_mr(mr2) == EINVAL);
    CHECK(ibv_dereg_mr(m2b) == EINVAL);
    ibv_unimport_mr(m2b);
    errno = 0;
    CHECK(ibv_import_mr(v, mr2->handle) == nullptr && errno == ENOENT);
    // A PD with an MR cannot go, through a view either.
    CHECK(ibv_dealloc_pd(v) == EBUSY);
    ibv_unimport_pd(v);
    // A parent domain on a view holds the PD, and outlives the view's unimport.
    ibv_pd* w = ibv_import_pd(imp, pd_handle);
    REQUIRE(w);
    ibv_parent_domain_init_attr pa{};
    pa.pd = w;
    ibv_pd* parent = ibv_alloc_parent_domain(imp, &pa);
    REQUIRE(parent);
    ibv_pd* w2 = ibv_import_pd(imp, pd_handle);
    REQUIRE(w2);
    ibv_unimport_pd(w);
    ibv_mr* pmr = ibv_reg_mr(parent, mem.data(), mem.size(), IBV_ACCESS_LOCAL_WRITE);
    CHECK(pmr != nullptr);
    if (pmr) CHECK(ibv_dereg_mr(pmr) == 0);
    CHECK(ibv_dealloc_pd(parent) == 0);
    ibv_unimport_pd(w2);

    // The owner's context closes; the file, and so its objects, live on.
    CHECK(ibv_close_device(owner) == 0);
    ibv_pd* ipd = ibv_import_pd(imp, pd_handle);
    REQUIRE(ipd);
    ibv_mr* imr = ibv_import_mr(ipd, mr_handle);
    CHECK(imr != nullptr && imr && imr->rkey == mr_rkey);
    ibv_mr* extra = ibv_reg_mr(ipd, mem.data(), mem.size(), IBV_ACCESS_LOCAL_WRITE);
    CHECK(extra != nullptr);
    if (extra) CHECK(ibv_dereg_mr(extra) == 0);
    if (imr) CHECK(ibv_dereg_mr(imr) == 0);  // destroys the owner's MR
    CHECK(ibv_dealloc_pd(ipd) == 0);          // and now its PD
    errno = 0;
    CHECK(ibv_import_pd(imp, pd_handle) == nullptr && errno == ENOENT);
    // Left for the close: a PD and a view of it.
    ibv_pd* left = ibv_alloc_pd(imp);
    CHECK(left != nullptr);
    CHECK(left && ibv_import_pd(imp, left->handle) != nullptr);
    CHECK(ibv_close_device(imp) == 0);
}

}  // namespace

int main()
{
    fd_copies_case();
    traffic_case();
    lifetime_case();
    return iwemu::test::check_exit_status("verbs_import", "all checks passed");
}
