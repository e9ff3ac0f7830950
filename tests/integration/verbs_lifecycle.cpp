// The whole verbs object life cycle through the distro's libibverbs and the
// iwemu provider, run under iwemu-run: device list and identity, two
// contexts, PD, MR, completion channel + CQ, QP state changes, SRQ, local
// completions (flush in ERROR) delivered through the channel, an async event
// (CQ overflow) through the async fd, the dependency rules of destroy
// (EBUSY while in use) in every order, closing a context with live objects,
// and a forked child using the device.  Every wait is bounded.
#include <infiniband/verbs.h>
#include <poll.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "check.h"
#include "rc_qp_attr.h"

namespace {

bool readable(int fd, int timeout_ms)
{
    pollfd p{fd, POLLIN, 0};
    return poll(&p, 1, timeout_ms) == 1 && (p.revents & POLLIN);
}

ibv_device* find_iwemu(ibv_device** list, int n)
{
    for (int i = 0; i < n; ++i)
        if (std::strcmp(ibv_get_device_name(list[i]), "iwemu0") == 0) return list[i];
    return nullptr;
}

void check_identity(ibv_context* ctx)
{
    ibv_device_attr dev{};
    REQUIRE(ibv_query_device(ctx, &dev) == 0);
    CHECK(dev.phys_port_cnt == 1);
    CHECK(dev.max_qp_rd_atom >= 1 && dev.max_qp_rd_atom <= 255);  // librdmacm stores uint8
    CHECK(dev.max_qp_init_rd_atom >= 1 && dev.max_qp_init_rd_atom <= 255);
    CHECK(dev.atomic_cap == IBV_ATOMIC_HCA);  // RFC 7306 atomics (emulator/qp/atomics.cpp)
    CHECK(dev.node_guid == ibv_get_device_guid(ctx->device));
    CHECK(ctx->device->transport_type == IBV_TRANSPORT_IWARP);
    CHECK(ctx->device->node_type == IBV_NODE_RNIC);

    ibv_device_attr_ex ex{};
    CHECK(ibv_query_device_ex(ctx, nullptr, &ex) == 0);
    CHECK(ex.orig_attr.vendor_id == dev.vendor_id);

    ibv_port_attr port{};
    REQUIRE(ibv_query_port(ctx, 1, &port) == 0);
    CHECK(port.state == IBV_PORT_ACTIVE);
    CHECK(port.link_layer == IBV_LINK_LAYER_ETHERNET);
    CHECK(port.gid_tbl_len >= 1);
    ibv_port_attr no_port{};
    CHECK(ibv_query_port(ctx, 2, &no_port) != 0);

    // GIDs and P_Keys come from the shim's sysfs tree; every index below
    // gid_tbl_len must answer with a non-zero GID, GID 0 is an IPv4-mapped
    // address, and the index after the table does not exist.
    for (int i = 0; i < port.gid_tbl_len; ++i) {
        ibv_gid gid{};
        static const uint8_t zero[16] = {};
        CHECK(ibv_query_gid(ctx, 1, i, &gid) == 0 && std::memcmp(gid.raw, zero, 16) != 0);
        static const uint8_t mapped[12] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff};
        if (i == 0) CHECK(std::memcmp(gid.raw, mapped, sizeof mapped) == 0);
    }
    ibv_gid past{};
    CHECK(ibv_query_gid(ctx, 1, port.gid_tbl_len, &past) != 0);
    __be16 pkey = 0;
    CHECK(ibv_query_pkey(ctx, 1, 0, &pkey) == 0 && pkey == 0xffff);
}

// CQ overflow is the one async event a single process can provoke without
// a peer: QPs in ERROR flush every posted WR into a CQ that is too small.
void check_async_cq_overflow(ibv_context* ctx, ibv_pd* pd)
{
    ibv_cq* tiny = ibv_create_cq(ctx, 1, nullptr, nullptr, 0);
    REQUIRE(tiny);
    ibv_qp_init_attr ia = iwemu::test::rc_qp_attr(tiny, {64, 64, 1, 1, 0});
    ibv_qp* qp = ibv_create_qp(pd, &ia);
    REQUIRE(qp);
    ibv_qp_attr a{};
    a.qp_state = IBV_QPS_ERR;
    CHECK(ibv_modify_qp(qp, &a, IBV_QP_STATE) == 0);
    const int wrs = tiny->cqe + 8;
    for (int i = 0; i < wrs; ++i) {
        ibv_recv_wr wr{};
        wr.wr_id = i;
        ibv_recv_wr* bad = nullptr;
        CHECK(ibv_post_recv(qp, &wr, &bad) == 0);
    }
    CHECK(readable(ctx->async_fd, 2000));
    ibv_async_event ev{};
    if (readable(ctx->async_fd, 0)) {
        CHECK(ibv_get_async_event(ctx, &ev) == 0);
        CHECK(ev.event_type == IBV_EVENT_CQ_ERR);
        CHECK(ev.element.cq == tiny);
        ibv_ack_async_event(&ev);
    }
    ibv_wc wc[4];
    while (ibv_poll_cq(tiny, 4, wc) > 0) {
    }
    CHECK(ibv_destroy_qp(qp) == 0);
    CHECK(ibv_destroy_cq(tiny) == 0);
}

// Every destroy order of {PD, MR, channel, CQ, SRQ, QP} (all 720): each
// destroy succeeds exactly when no live object depends on the target, and
// answers EBUSY (also in errno) otherwise -- the rules ib_uverbs enforces
// with use counts.
void check_destroy_orders(ibv_context* ctx)
{
    enum { PD, MR, CH, CQ, SRQ, QP, N };
    // needs[a] = objects a depends on (a must go before them).
    const std::vector<std::vector<int>> needs = {{}, {PD}, {}, {CH}, {PD}, {PD, CQ, SRQ}};
    int order[N] = {0, 1, 2, 3, 4, 5};
    static char buf[4096];
    int permutations = 0, mismatches = 0;
    do {
        ibv_pd* pd = ibv_alloc_pd(ctx);
        ibv_mr* mr = pd ? ibv_reg_mr(pd, buf, sizeof buf, IBV_ACCESS_LOCAL_WRITE) : nullptr;
        ibv_comp_channel* ch = ibv_create_comp_channel(ctx);
        ibv_cq* cq = ch ? ibv_create_cq(ctx, 4, nullptr, ch, 0) : nullptr;
        ibv_srq_init_attr sia{};
        sia.attr = {4, 1, 0};
        ibv_srq* srq = pd ? ibv_create_srq(pd, &sia) : nullptr;
        ibv_qp_init_attr ia = iwemu::test::rc_qp_attr(cq, {2, 0, 1, 0, 0}, srq);
        ibv_qp* qp = (pd && cq && srq) ? ibv_create_qp(pd, &ia) : nullptr;
        if (!pd || !mr || !ch || !cq || !srq || !qp) {
            CHECK(!"creating the object set");
            return;
        }
        bool alive[N] = {true, true, true, true, true, true};
        auto destroy = [&](int o) {
            switch (o) {
            case PD: return ibv_dealloc_pd(pd);
            case MR: return ibv_dereg_mr(mr);
            case CH: return ibv_destroy_comp_channel(ch);
            case CQ: return ibv_destroy_cq(cq);
            case SRQ: return ibv_destroy_srq(srq);
            default: return ibv_destroy_qp(qp);
            }
        };
        for (int left = N, pass = 0; left > 0 && pass < N; ++pass) {
            for (int o : order) {
                if (!alive[o]) continue;
                bool busy = false;
                for (int d = 0; d < N; ++d)
                    for (int need : needs[d])
                        if (alive[d] && need == o) busy = true;
                errno = 0;
                const int rc = destroy(o);
                if (rc != (busy ? EBUSY : 0)) ++mismatches;
                // errno too, as the kernel path leaves it (the write() to the
                // uverbs fd fails); perftest prints strerror(errno).  The
                // channel is libibverbs' own check, which sets none.
                if (rc && o != CH && errno != rc) ++mismatches;
                if (rc == 0) {
                    alive[o] = false;
                    --left;
                }
            }
        }
        for (bool a : alive) CHECK(!a);
        ++permutations;
    } while (std::next_permutation(order, order + N) && mismatches == 0);
    CHECK(permutations == 720);
    CHECK(mismatches == 0);
}

}  // namespace

int main()
{
    int n = 0;
    ibv_device** list = ibv_get_device_list(&n);
    REQUIRE(list && n >= 1);
    ibv_device* dev = find_iwemu(list, n);
    REQUIRE(dev);
    CHECK(ibv_get_device_guid(dev) != 0);

    ibv_context* ctx = ibv_open_device(dev);
    REQUIRE(ctx);
    ibv_context* ctx2 = ibv_open_device(dev);  // perftest + librdmacm hold two
    REQUIRE(ctx2);
    CHECK(ctx->async_fd >= 0 && ctx->num_comp_vectors >= 1);
    check_identity(ctx);

    // ---- PD + MR ----
    ibv_pd* pd = ibv_alloc_pd(ctx);
    REQUIRE(pd);
    std::vector<char> buf(1 << 16);
    ibv_mr* mr = ibv_reg_mr(pd, buf.data(), buf.size(),
                            IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ);
    REQUIRE(mr);
    CHECK(mr->lkey != 0 && mr->addr == buf.data() && mr->length == buf.size() && mr->pd == pd);
    errno = 0;
    CHECK(ibv_reg_mr(pd, buf.data(), buf.size(), IBV_ACCESS_REMOTE_WRITE) == nullptr);  // needs LOCAL_WRITE
    CHECK(ibv_dealloc_pd(pd) == EBUSY);  // MR still in it
    // qperf always asks for REMOTE_ATOMIC (RFC 7306 atomics use it).
    ibv_mr* mr_atomic = ibv_reg_mr(pd, buf.data(), 4096, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_ATOMIC);
    CHECK(mr_atomic != nullptr);
    if (mr_atomic) CHECK(ibv_dereg_mr(mr_atomic) == 0);

    // ---- completion channel + CQs ----
    ibv_comp_channel* ch = ibv_create_comp_channel(ctx);
    REQUIRE(ch);
    CHECK(ch->fd >= 0);
    ibv_cq* cq = ibv_create_cq(ctx, 64, reinterpret_cast<void*>(0x1234), ch, 0);
    REQUIRE(cq);
    CHECK(cq->cqe >= 64 && cq->channel == ch && cq->cq_context == reinterpret_cast<void*>(0x1234));
    CHECK(ibv_destroy_comp_channel(ch) == EBUSY);  // CQ still bound
    ibv_cq* cq_plain = ibv_create_cq(ctx, 16, nullptr, nullptr, 0);
    REQUIRE(cq_plain);
    CHECK(ibv_create_cq(ctx, 16, nullptr, nullptr, 5) == nullptr);  // no comp vector 5

    // ---- SRQ ----
    ibv_srq_init_attr sia{};
    sia.attr = {32, 1, 0};
    ibv_srq* srq = ibv_create_srq(pd, &sia);
    REQUIRE(srq);
    CHECK(sia.attr.max_wr >= 32);
    ibv_srq_attr sa{};
    CHECK(ibv_query_srq(srq, &sa) == 0 && sa.max_wr >= 32);
    sa.srq_limit = 4;
    CHECK(ibv_modify_srq(srq, &sa, IBV_SRQ_LIMIT) == 0);
    ibv_sge sge{reinterpret_cast<uintptr_t>(buf.data()), 256, mr->lkey};
    for (int i = 0; i < 8; ++i) {
        ibv_recv_wr wr{};
        wr.wr_id = 100 + i;
        wr.sg_list = &sge;
        wr.num_sge = 1;
        ibv_recv_wr* bad = nullptr;
        CHECK(ibv_post_srq_recv(srq, &wr, &bad) == 0);
    }

    // ---- QPs ----
    ibv_qp_init_attr ia = iwemu::test::rc_qp_attr(cq, {16, 16, 1, 1, 0});
    ia.qp_context = reinterpret_cast<void*>(0x5678);
    ibv_qp* qp = ibv_create_qp(pd, &ia);
    REQUIRE(qp);
    // An iWARP QP queries as INIT once created (kernel siw, cxgb4; rdma-core's
    // test_query_rc_qp): IDLE, which RESET and INIT both map to.  The
    // ibv_qp's own state field starts at RESET, as the kernel path sets it
    // (rdma-core's test_create_rc_qp_no_attr), until a query or modify.
    CHECK(qp->qp_num != 0 && qp->state == IBV_QPS_RESET && qp->qp_context == reinterpret_cast<void*>(0x5678));
    CHECK(ia.cap.max_send_wr >= 16 && ia.cap.max_recv_wr >= 16);

    ibv_qp_init_attr ia_srq = ia;
    ia_srq.srq = srq;
    ia_srq.recv_cq = cq_plain;
    ibv_qp* qp_srq = ibv_create_qp(pd, &ia_srq);
    REQUIRE(qp_srq);
    CHECK(qp_srq->qp_num != qp->qp_num);

    ibv_qp_init_attr ud = ia;
    ud.qp_type = IBV_QPT_UD;
    CHECK(ibv_create_qp(pd, &ud) == nullptr);  // iWARP is RC only

    ibv_qp_attr attr{};
    ibv_qp_init_attr qinit{};
    CHECK(ibv_query_qp(qp, &attr, IBV_QP_STATE | IBV_QP_CAP, &qinit) == 0 && attr.qp_state == IBV_QPS_INIT);
    CHECK(attr.cur_qp_state == IBV_QPS_INIT);
    CHECK(qp->state == IBV_QPS_INIT);  // libibverbs copied the queried state
    // RESET is still reachable, and INIT again from there.
    attr = {};
    attr.qp_state = IBV_QPS_RESET;
    CHECK(ibv_modify_qp(qp, &attr, IBV_QP_STATE) == 0);
    CHECK(ibv_query_qp(qp, &attr, IBV_QP_STATE, &qinit) == 0 && attr.qp_state == IBV_QPS_RESET);
    attr = {};
    attr.qp_state = IBV_QPS_INIT;
    attr.pkey_index = 0;
    attr.port_num = 1;
    attr.qp_access_flags = IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ;
    CHECK(ibv_modify_qp(qp, &attr, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS) == 0);
    CHECK(ibv_query_qp(qp, &attr, IBV_QP_STATE, &qinit) == 0 && attr.qp_state == IBV_QPS_INIT);
    attr = {};
    attr.qp_state = IBV_QPS_RTR;  // IB-style connect to an unspecified dgid: refused at once, QP stays in INIT
    attr.dest_qp_num = 1234;
    attr.ah_attr.is_global = 1;
    attr.ah_attr.port_num = 1;
    CHECK(ibv_modify_qp(qp, &attr, IBV_QP_STATE | IBV_QP_AV | IBV_QP_DEST_QPN | IBV_QP_PATH_MTU | IBV_QP_RQ_PSN) ==
          EINVAL);
    CHECK(ibv_query_qp(qp, &attr, IBV_QP_STATE, &qinit) == 0 && attr.qp_state == IBV_QPS_INIT);
    attr = {};
    attr = {};
    attr.qp_state = IBV_QPS_SQE;  // only the RNIC itself enters SQE
    CHECK(ibv_modify_qp(qp, &attr, IBV_QP_STATE) != 0);

    // Receives may be posted in INIT (perftest -R does so before connecting).
    for (int i = 0; i < 4; ++i) {
        ibv_recv_wr wr{};
        wr.wr_id = 10 + i;
        wr.sg_list = &sge;
        wr.num_sge = 1;
        ibv_recv_wr* bad = nullptr;
        CHECK(ibv_post_recv(qp, &wr, &bad) == 0);
    }

    // ---- local completions through the completion channel ----
    CHECK(ibv_req_notify_cq(cq, 0) == 0);
    attr = {};
    attr.qp_state = IBV_QPS_ERR;
    CHECK(ibv_modify_qp(qp, &attr, IBV_QP_STATE) == 0);
    ibv_send_wr swr{};
    swr.wr_id = 77;
    swr.opcode = IBV_WR_SEND;
    swr.sg_list = &sge;
    swr.num_sge = 1;
    swr.send_flags = IBV_SEND_SIGNALED;
    ibv_send_wr* sbad = nullptr;
    CHECK(ibv_post_send(qp, &swr, &sbad) == 0);
    CHECK(readable(ch->fd, 2000));
    if (readable(ch->fd, 0)) {
        ibv_cq* ev_cq = nullptr;
        void* ev_ctx = nullptr;
        CHECK(ibv_get_cq_event(ch, &ev_cq, &ev_ctx) == 0);
        CHECK(ev_cq == cq && ev_ctx == reinterpret_cast<void*>(0x1234));
        ibv_ack_cq_events(cq, 1);
    }
    // Arming asks for the next completion only, as kernel siw and rxe do:
    // the completions still in the CQ raise no event (a loop that waits,
    // re-arms and polls once would otherwise run one event ahead).
    CHECK(ibv_req_notify_cq(cq, 0) == 0);
    CHECK(!readable(ch->fd, 100));
    ibv_wc wc[32];
    int got = 0, flushed_recv = 0, flushed_send = 0;
    for (int tries = 0; tries < 200 && flushed_recv + flushed_send < 5; ++tries) {
        got = ibv_poll_cq(cq, 32, wc);
        CHECK(got >= 0);
        for (int i = 0; i < got; ++i) {
            CHECK(wc[i].status == IBV_WC_WR_FLUSH_ERR);
            CHECK(wc[i].qp_num == qp->qp_num);
            if (wc[i].wr_id == 77) ++flushed_send;
            if (wc[i].wr_id >= 10 && wc[i].wr_id < 14) ++flushed_recv;
        }
        if (flushed_recv + flushed_send < 5) poll(nullptr, 0, 10);
    }
    CHECK(flushed_send == 1);
    CHECK(flushed_recv == 4);
    CHECK(!readable(ch->fd, 50));  // one event per arm
    // The arm holds until a completion comes: the next one raises the event.
    swr.wr_id = 78;
    CHECK(ibv_post_send(qp, &swr, &sbad) == 0);
    CHECK(readable(ch->fd, 2000));
    if (readable(ch->fd, 0)) {
        ibv_cq* ev_cq = nullptr;
        void* ev_ctx = nullptr;
        CHECK(ibv_get_cq_event(ch, &ev_cq, &ev_ctx) == 0 && ev_cq == cq);
        ibv_ack_cq_events(cq, 1);
    }
    got = 0;
    for (int tries = 0; tries < 200 && got == 0; ++tries) {
        got = ibv_poll_cq(cq, 32, wc);
        if (got == 0) poll(nullptr, 0, 10);
    }
    CHECK(got == 1 && wc[0].wr_id == 78 && wc[0].status == IBV_WC_WR_FLUSH_ERR);

    // ---- async events ----
    check_async_cq_overflow(ctx, pd);
    check_destroy_orders(ctx2);

    // ---- destroy: dependency rules, then several legal orders ----
    CHECK(ibv_destroy_cq(cq) == EBUSY);        // qp uses it
    CHECK(ibv_destroy_srq(srq) == EBUSY);      // qp_srq uses it
    errno = 0;
    CHECK(ibv_dealloc_pd(pd) == EBUSY && errno == EBUSY);  // QPs, SRQ and MR in it
    CHECK(ibv_destroy_qp(qp) == 0);
    CHECK(ibv_destroy_cq(cq) == EBUSY);        // still qp_srq's send CQ
    CHECK(ibv_dereg_mr(mr) == 0);              // MR before the QP that shares the PD
    CHECK(ibv_destroy_qp(qp_srq) == 0);
    CHECK(ibv_destroy_cq(cq) == 0);            // CQ before its channel
    CHECK(ibv_destroy_comp_channel(ch) == 0);
    CHECK(ibv_destroy_srq(srq) == 0);
    CHECK(ibv_destroy_cq(cq_plain) == 0);
    CHECK(ibv_dealloc_pd(pd) == 0);

    // Second context: objects in the reverse order of creation dependencies
    // being torn down child-first, PD last; channel outliving nothing.
    ibv_pd* pd2 = ibv_alloc_pd(ctx2);
    REQUIRE(pd2);
    ibv_comp_channel* ch2 = ibv_create_comp_channel(ctx2);
    REQUIRE(ch2);
    ibv_cq* cq2 = ibv_create_cq(ctx2, 8, nullptr, ch2, 0);
    REQUIRE(cq2);
    ibv_qp_init_attr ia2 = iwemu::test::rc_qp_attr(cq2, {4, 4, 1, 1, 0});
    ibv_qp* qp2 = ibv_create_qp(pd2, &ia2);
    REQUIRE(qp2);
    ibv_mr* mr2 = ibv_reg_mr(pd2, buf.data(), 4096, IBV_ACCESS_LOCAL_WRITE);
    REQUIRE(mr2);
    CHECK(ibv_destroy_qp(qp2) == 0);
    CHECK(ibv_dereg_mr(mr2) == 0);
    CHECK(ibv_dealloc_pd(pd2) == 0);           // PD before the CQ: CQs are not in a PD
    CHECK(ibv_destroy_cq(cq2) == 0);
    CHECK(ibv_destroy_comp_channel(ch2) == 0);

    // Closing a context with live objects destroys them, as closing the
    // uverbs file does in the kernel.
    ibv_context* ctx3 = ibv_open_device(dev);
    REQUIRE(ctx3);
    ibv_pd* pd3 = ibv_alloc_pd(ctx3);
    ibv_cq* cq3 = ibv_create_cq(ctx3, 8, nullptr, nullptr, 0);
    REQUIRE(pd3 && cq3);
    ibv_srq_init_attr sia3{};
    sia3.attr = {4, 1, 0};
    ibv_srq* srq3 = ibv_create_srq(pd3, &sia3);
    ibv_qp_init_attr ia3 = iwemu::test::rc_qp_attr(cq3, {4, 0, 1, 0, 0}, srq3);
    CHECK(srq3 && ibv_create_qp(pd3, &ia3) != nullptr);
    CHECK(ibv_reg_mr(pd3, buf.data(), 4096, IBV_ACCESS_LOCAL_WRITE) != nullptr);
    CHECK(ibv_close_device(ctx3) == 0);

    CHECK(ibv_close_device(ctx2) == 0);
    CHECK(ibv_close_device(ctx) == 0);
    ibv_free_device_list(list);

    // qperf's server forks a child per test, which opens the device itself.
    std::fflush(nullptr);
    pid_t child = fork();
    if (child == 0) {
        alarm(10);
        int cn = 0;
        ibv_device** cl = ibv_get_device_list(&cn);
        ibv_context* cc = cl && cn > 0 ? ibv_open_device(cl[0]) : nullptr;
        ibv_pd* cpd = cc ? ibv_alloc_pd(cc) : nullptr;
        ibv_comp_channel* cch = cc ? ibv_create_comp_channel(cc) : nullptr;
        ibv_cq* ccq = cch ? ibv_create_cq(cc, 8, nullptr, cch, 0) : nullptr;
        ibv_qp_init_attr cia = iwemu::test::rc_qp_attr(ccq, {4, 4, 1, 1, 0});
        ibv_qp* cqp = cpd && ccq ? ibv_create_qp(cpd, &cia) : nullptr;
        if (!cqp || ibv_req_notify_cq(ccq, 0) != 0) _exit(2);
        ibv_qp_attr ca{};
        ca.qp_state = IBV_QPS_ERR;
        ibv_recv_wr cwr{};
        ibv_recv_wr* cbad = nullptr;
        if (ibv_modify_qp(cqp, &ca, IBV_QP_STATE) != 0 || ibv_post_recv(cqp, &cwr, &cbad) != 0) _exit(3);
        ibv_cq* ev_cq = nullptr;
        void* ev_ctx = nullptr;
        ibv_wc cwc{};
        if (!readable(cch->fd, 2000) || ibv_get_cq_event(cch, &ev_cq, &ev_ctx) != 0 || ev_cq != ccq) _exit(4);
        ibv_ack_cq_events(ccq, 1);
        if (ibv_poll_cq(ccq, 1, &cwc) != 1 || cwc.status != IBV_WC_WR_FLUSH_ERR) _exit(5);
        _exit(ibv_close_device(cc) == 0 ? 0 : 6);
    }
    int status = -1;
    CHECK(child > 0 && waitpid(child, &status, 0) == child);
    CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0);

    return iwemu::test::check_exit_status("verbs_lifecycle", "all checks passed");
}
