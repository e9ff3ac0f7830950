// Connection churn through the distro's librdmacm, client and server in one
// process: connect, one Send, disconnect, destroy, CYCLES times (default
// 5,000).  The heap in use (mallinfo2) and the resident set must stay flat
// after a warm-up: every connection used to leave its CM record behind,
// and with it the destroyed QP's memory (about 37 KB; issue 25 item 2).
// Run under iwemu-run; exits non-zero on a failed step or growth.
#include <arpa/inet.h>
#include <fcntl.h>
#include <malloc.h>
#include <poll.h>
#include <rdma/rdma_cma.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "rc_qp_attr.h"

namespace {

constexpr size_t heap_bound = 512 * 1024;       // growth allowed after the warm-up
constexpr size_t rss_bound = 4 * 1024 * 1024;
constexpr int warm_up = 200;

bool fail(const char* what)
{
    std::fprintf(stderr, "FAIL: %s (errno %d %s)\n", what, errno, std::strerror(errno));
    return false;
}

rdma_cm_event* expect(rdma_event_channel* ch, rdma_cm_event_type type)
{
    pollfd p{ch->fd, POLLIN, 0};
    if (::poll(&p, 1, 10000) != 1) return nullptr;
    rdma_cm_event* ev = nullptr;
    if (rdma_get_cm_event(ch, &ev) != 0) return nullptr;
    if (ev->event == type && ev->status == 0) return ev;
    std::fprintf(stderr, "got %s status %d, wanted %s\n", rdma_event_str(ev->event), ev->status,
                 rdma_event_str(type));
    rdma_ack_cm_event(ev);
    return nullptr;
}

bool poll_one(ibv_cq* cq)
{
    ibv_wc wc;
    const auto end = std::chrono::steady_clock::now() + std::chrono::seconds(10);
    while (std::chrono::steady_clock::now() < end) {
        const int n = ibv_poll_cq(cq, 1, &wc);
        if (n < 0) return false;
        if (n == 1) return wc.status == IBV_WC_SUCCESS;
    }
    return false;
}

struct Endpoint {
    rdma_cm_id* id = nullptr;
    ibv_cq* cq = nullptr;
    ibv_mr* mr = nullptr;
    char buf[64] = {};

    bool make_qp()
    {
        if (!(cq = ibv_create_cq(id->verbs, 8, nullptr, nullptr, 0))) return fail("create_cq");
        ibv_qp_init_attr qa = iwemu::test::rc_qp_attr(cq, {4, 4, 1, 1, 0});
        if (rdma_create_qp(id, nullptr, &qa) != 0) return fail("create_qp");
        if (!(mr = ibv_reg_mr(id->pd, buf, sizeof buf, IBV_ACCESS_LOCAL_WRITE))) return fail("reg_mr");
        return true;
    }
    bool post(bool send)
    {
        ibv_sge sge{reinterpret_cast<uintptr_t>(buf), sizeof buf, mr->lkey};
        if (send) {
            ibv_send_wr wr{}, *bad = nullptr;
            wr.sg_list = &sge;
            wr.num_sge = 1;
            wr.opcode = IBV_WR_SEND;
            wr.send_flags = IBV_SEND_SIGNALED;
            return ibv_post_send(id->qp, &wr, &bad) == 0;
        }
        ibv_recv_wr wr{}, *bad = nullptr;
        wr.sg_list = &sge;
        wr.num_sge = 1;
        return ibv_post_recv(id->qp, &wr, &bad) == 0;
    }
    void destroy()
    {
        if (mr) ibv_dereg_mr(mr);
        if (id && id->qp) rdma_destroy_qp(id);
        if (cq) ibv_destroy_cq(cq);
        if (id) rdma_destroy_id(id);
        *this = {};
    }
};

bool cycle(rdma_event_channel* sch, rdma_event_channel* cch, uint16_t port)
{
    Endpoint cli, srv;
    sockaddr_in dst{};
    dst.sin_family = AF_INET;
    dst.sin_port = htons(port);
    dst.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    rdma_cm_event* ev;
    if (rdma_create_id(cch, &cli.id, nullptr, RDMA_PS_TCP)) return fail("create_id");
    if (rdma_resolve_addr(cli.id, nullptr, reinterpret_cast<sockaddr*>(&dst), 2000)) return fail("resolve_addr");
    if (!(ev = expect(cch, RDMA_CM_EVENT_ADDR_RESOLVED))) return fail("ADDR_RESOLVED");
    rdma_ack_cm_event(ev);
    if (rdma_resolve_route(cli.id, 2000)) return fail("resolve_route");
    if (!(ev = expect(cch, RDMA_CM_EVENT_ROUTE_RESOLVED))) return fail("ROUTE_RESOLVED");
    rdma_ack_cm_event(ev);
    if (!cli.make_qp()) return false;
    rdma_conn_param cp{};
    cp.responder_resources = cp.initiator_depth = 1;
    if (rdma_connect(cli.id, &cp)) return fail("connect");
    if (!(ev = expect(sch, RDMA_CM_EVENT_CONNECT_REQUEST))) return fail("CONNECT_REQUEST");
    srv.id = ev->id;
    rdma_ack_cm_event(ev);
    if (!srv.make_qp() || !srv.post(false)) return fail("server QP");
    if (rdma_accept(srv.id, &cp)) return fail("accept");
    if (!(ev = expect(cch, RDMA_CM_EVENT_ESTABLISHED))) return fail("client ESTABLISHED");
    rdma_ack_cm_event(ev);
    if (!(ev = expect(sch, RDMA_CM_EVENT_ESTABLISHED))) return fail("server ESTABLISHED");
    rdma_ack_cm_event(ev);
    if (!cli.post(true) || !poll_one(cli.cq) || !poll_one(srv.cq)) return fail("Send");
    if (rdma_disconnect(cli.id)) return fail("client disconnect");
    if (!(ev = expect(sch, RDMA_CM_EVENT_DISCONNECTED))) return fail("server DISCONNECTED");
    rdma_ack_cm_event(ev);
    rdma_disconnect(srv.id);
    if (!(ev = expect(cch, RDMA_CM_EVENT_DISCONNECTED))) return fail("client DISCONNECTED");
    rdma_ack_cm_event(ev);
    cli.destroy();
    srv.destroy();
    return true;
}

size_t rss_bytes()
{
    long pages = 0, resident = 0;
    if (FILE* f = std::fopen("/proc/self/statm", "r")) {
        if (std::fscanf(f, "%ld %ld", &pages, &resident) != 2) resident = 0;
        std::fclose(f);
    }
    return static_cast<size_t>(resident) * static_cast<size_t>(sysconf(_SC_PAGESIZE));
}

}  // namespace

int main(int argc, char** argv)
{
    const int cycles = argc > 1 ? std::atoi(argv[1]) : 5000;
    rdma_event_channel* sch = rdma_create_event_channel();
    rdma_event_channel* cch = rdma_create_event_channel();
    rdma_cm_id* listener = nullptr;
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (!sch || !cch || rdma_create_id(sch, &listener, nullptr, RDMA_PS_TCP) ||
        rdma_bind_addr(listener, reinterpret_cast<sockaddr*>(&addr)) || rdma_listen(listener, 16)) {
        fail("listener");
        return 1;
    }
    const uint16_t port = ntohs(rdma_get_src_port(listener));
    size_t heap0 = 0, rss0 = 0;
    const auto t0 = std::chrono::steady_clock::now();
    for (int i = 0; i < cycles; ++i) {
        if (!cycle(sch, cch, port)) {
            std::fprintf(stderr, "cycle %d failed\n", i);
            return 1;
        }
        if (i + 1 == warm_up) {
            malloc_trim(0);
            heap0 = mallinfo2().uordblks;
            rss0 = rss_bytes();
        }
    }
    malloc_trim(0);
    const size_t heap1 = mallinfo2().uordblks, rss1 = rss_bytes();
    const long long heap_growth = static_cast<long long>(heap1) - static_cast<long long>(heap0);
    const long long rss_growth = static_cast<long long>(rss1) - static_cast<long long>(rss0);
    const auto s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    std::printf("%d cycles in %.1f s: heap in use %zu -> %zu (%+lld B, %+.1f B a connection), RSS %zu -> %zu kB\n",
                cycles, s, heap0, heap1, heap_growth,
                static_cast<double>(heap_growth) / (cycles > warm_up ? cycles - warm_up : 1), rss0 / 1024,
                rss1 / 1024);
    rdma_destroy_id(listener);
    rdma_destroy_event_channel(cch);
    rdma_destroy_event_channel(sch);
    if (cycles > warm_up && (heap_growth > static_cast<long long>(heap_bound) ||
                             rss_growth > static_cast<long long>(rss_bound))) {
        std::fprintf(stderr, "FAIL: memory grows with connections (bounds: heap %zu B, RSS %zu B)\n",
                     heap_bound, rss_bound);
        return 1;
    }
    return 0;
}
