/* A server that answers one connect request -- rdma_reject or rdma_accept,
 * both with private data -- and calls exit() at once, as a short-lived
 * program does -- or _exit(), as rdma-core's test_rdmacm_async_reject_traffic
 * (os._exit) does, which runs no exit handler; and the client that must
 * still see the answer with that private data.  With the kernel doing the
 * work the MPA Reply is on the wire when the call returns.
 *
 *   rdmacm_answer_exit server reject|accept ADDRESS PORT [_exit]
 *   rdmacm_answer_exit client reject|accept ADDRESS PORT
 *
 * Exit status 0 on success; every wait is bounded (10 s). */
#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <rdma/rdma_cma.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static const char server_says[] = "iwemu: answered, then exit()";
static const char client_says[] = "iwemu: please connect";

static int fail(const char* what)
{
    perror(what);
    return 1;
}

/* The next event on ch, within 10 s; NULL on timeout or error. */
static struct rdma_cm_event* next_event(struct rdma_event_channel* ch)
{
    struct pollfd p = {ch->fd, POLLIN, 0};
    struct rdma_cm_event* ev = NULL;
    if (poll(&p, 1, 10000) != 1) {
        fprintf(stderr, "no rdma_cm event within 10 s\n");
        return NULL;
    }
    if (rdma_get_cm_event(ch, &ev)) return NULL;
    return ev;
}

static int expect(struct rdma_event_channel* ch, enum rdma_cm_event_type type)
{
    struct rdma_cm_event* ev = next_event(ch);
    int ok = ev && ev->event == type && ev->status == 0;
    if (ev && !ok)
        fprintf(stderr, "got %s (status %d), wanted %s\n", rdma_event_str(ev->event), ev->status,
                rdma_event_str(type));
    if (ev) rdma_ack_cm_event(ev);
    return ok ? 0 : -1;
}

/* A small RC QP on id (what rdma_connect / rdma_accept name). */
static int create_qp(struct rdma_cm_id* id, struct ibv_pd** pd, struct ibv_cq** cq)
{
    struct ibv_qp_init_attr attr;
    *pd = ibv_alloc_pd(id->verbs);
    *cq = *pd ? ibv_create_cq(id->verbs, 4, NULL, NULL, 0) : NULL;
    if (!*cq) return -1;
    memset(&attr, 0, sizeof attr);
    attr.send_cq = attr.recv_cq = *cq;
    attr.qp_type = IBV_QPT_RC;
    attr.cap.max_send_wr = attr.cap.max_recv_wr = 2;
    attr.cap.max_send_sge = attr.cap.max_recv_sge = 1;
    return rdma_create_qp(id, *pd, &attr);
}

static int server(int reject, int no_exit_handlers, struct sockaddr_in* addr)
{
    struct rdma_event_channel* ch = rdma_create_event_channel();
    struct rdma_cm_id* listener;
    struct rdma_cm_event* ev;
    struct rdma_conn_param param;
    struct ibv_pd* pd;
    struct ibv_cq* cq;
    if (!ch || rdma_create_id(ch, &listener, NULL, RDMA_PS_TCP)) return fail("rdma_create_id");
    if (rdma_bind_addr(listener, (struct sockaddr*)addr) || rdma_listen(listener, 1)) return fail("rdma_listen");
    ev = next_event(ch);
    if (!ev || ev->event != RDMA_CM_EVENT_CONNECT_REQUEST) {
        fprintf(stderr, "no connect request\n");
        return 1;
    }
    if (reject) {
        if (rdma_reject(ev->id, server_says, sizeof server_says)) return fail("rdma_reject");
    } else {
        if (create_qp(ev->id, &pd, &cq)) return fail("rdma_create_qp");
        memset(&param, 0, sizeof param);
        param.private_data = server_says;
        param.private_data_len = sizeof server_says;
        param.responder_resources = param.initiator_depth = 1;
        if (rdma_accept(ev->id, &param)) return fail("rdma_accept");
    }
    if (no_exit_handlers) _exit(0);
    exit(0); /* at once: no ack, no destroy */
}

static int client(int reject, struct sockaddr_in* addr)
{
    struct rdma_event_channel* ch = rdma_create_event_channel();
    struct rdma_cm_id* id;
    struct rdma_cm_event* ev;
    struct rdma_conn_param param;
    enum rdma_cm_event_type want = reject ? RDMA_CM_EVENT_REJECTED : RDMA_CM_EVENT_ESTABLISHED;
    struct ibv_pd* pd;
    struct ibv_cq* cq;
    int ok;
    if (!ch || rdma_create_id(ch, &id, NULL, RDMA_PS_TCP)) return fail("rdma_create_id");
    if (rdma_resolve_addr(id, NULL, (struct sockaddr*)addr, 2000) || expect(ch, RDMA_CM_EVENT_ADDR_RESOLVED))
        return fail("rdma_resolve_addr");
    if (rdma_resolve_route(id, 2000) || expect(ch, RDMA_CM_EVENT_ROUTE_RESOLVED)) return fail("rdma_resolve_route");
    if (create_qp(id, &pd, &cq)) return fail("rdma_create_qp");
    memset(&param, 0, sizeof param);
    param.private_data = client_says;
    param.private_data_len = sizeof client_says;
    param.responder_resources = param.initiator_depth = 1;
    if (rdma_connect(id, &param)) return fail("rdma_connect");
    ev = next_event(ch);
    if (!ev) return 1;
    /* iWARP reports the Reply's private data as received (the length may
     * be padded); the server's octets must lead it. */
    ok = ev->event == want && ev->param.conn.private_data_len >= sizeof server_says &&
         memcmp(ev->param.conn.private_data, server_says, sizeof server_says) == 0;
    printf("%s (status %d), private data of %u octets%s\n", rdma_event_str(ev->event), ev->status,
           ev->param.conn.private_data_len, ok ? ", the server's" : "");
    rdma_ack_cm_event(ev);
    /* The client cleans up (leak checkers watch it); the server did not. */
    rdma_destroy_qp(id);
    ibv_destroy_cq(cq);
    ibv_dealloc_pd(pd);
    rdma_destroy_id(id);
    rdma_destroy_event_channel(ch);
    return ok ? 0 : 1;
}

int main(int argc, char** argv)
{
    struct sockaddr_in addr;
    int reject;
    if ((argc != 5 && argc != 6) || (strcmp(argv[2], "reject") && strcmp(argv[2], "accept")) ||
        (argc == 6 && strcmp(argv[5], "_exit"))) {
        fprintf(stderr, "usage: %s server|client reject|accept ADDRESS PORT [_exit]\n", argv[0]);
        return 2;
    }
    reject = strcmp(argv[2], "reject") == 0;
    memset(&addr, 0, sizeof addr);
    addr.sin_family = AF_INET;
    addr.sin_port = htons((unsigned short)atoi(argv[4]));
    if (inet_pton(AF_INET, argv[3], &addr.sin_addr) != 1) {
        fprintf(stderr, "not an IPv4 address: %s\n", argv[3]);
        return 2;
    }
    if (strcmp(argv[1], "server") == 0) return server(reject, argc == 6, &addr);
    if (strcmp(argv[1], "client") == 0) return client(reject, &addr);
    fprintf(stderr, "usage: %s server|client reject|accept ADDRESS PORT\n", argv[0]);
    return 2;
}
