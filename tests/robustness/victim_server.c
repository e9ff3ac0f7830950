/* victim_server: an rdma_cm server for hostile-peer tests, run under iwemu-run.
 *
 * It listens on 127.0.0.1:PORT, accepts every connection, and reports each
 * event on stdout, one line each (flushed), for the test driver to match:
 *
 *   LISTEN port=P
 *   REQUEST conn=N pd="..."            connect request (ULP private data)
 *   ESTABLISHED conn=N
 *   WC conn=N opcode=RECV status=S byte_len=L data=HEX
 *   ASYNC conn=N event=NAME
 *   DISCONNECTED conn=N | CM conn=N event=NAME status=S
 *   CANARY conn=N ok | CANARY conn=N CORRUPT region=NAME offset=O
 *   DONE conn=N
 *   EXIT ok                            on SIGTERM / SIGINT
 *
 * Memory the peer may reach is registered once, in one PD, each region sitting
 * between PROT_NONE guard pages and canary bytes: "rw" (remote read+write),
 * "ro" (remote read), "wo" (remote write), "big" (8 MiB, remote read: to keep
 * Read Responses in flight) and two 256-octet receive buffers.  The accept's
 * private data tells the peer where they are:
 *   "rw=STAG:ADDR:LEN ro=... wo=... big=... recv=COUNT:SIZE ird=N"
 * The peer's own private data may ask for "recv=K" (receives posted, 0..2),
 * "ird=N" (responder resources) and "linger=MS" (keep the QP that long after
 * DISCONNECTED before destroying it, as a slow application would).  Canaries are checked when each connection
 * ends; the server keeps serving until signalled.
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <stdarg.h>
#include <fcntl.h>
#include <infiniband/verbs.h>
#include <poll.h>
#include <rdma/rdma_cma.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <sys/mman.h>
#include <unistd.h>

enum { canary_size = 256, recv_slots = 2, recv_size = 256, max_conns = 4096 };
static const uint8_t canary_byte = 0xA5;

struct region {
    const char *name;
    uint8_t *map;     /* whole mapping, guard pages included */
    size_t map_len;
    uint8_t *buf;     /* registered part */
    size_t len;
    struct ibv_mr *mr;
};

struct conn {
    int serial;
    struct rdma_cm_id *id;
    struct ibv_cq *cq;
    int established;
    int linger_ms;        /* "linger=MS": keep the QP that long after DISCONNECTED */
    long long destroy_at; /* monotonic ms; 0 = not scheduled */
};

static volatile sig_atomic_t stop;
static struct ibv_pd *pd;
static struct region rw, ro, wo, big, recvbuf[recv_slots];
static struct conn *conns[max_conns];
static int next_serial = 1;

static void on_signal(int sig) { (void)sig; stop = 1; }

static long long now_ms(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (long long)t.tv_sec * 1000 + t.tv_nsec / 1000000;
}

static void say(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static void say(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vprintf(fmt, ap);
    va_end(ap);
    putchar('\n');
    fflush(stdout);
}

static const char *wc_status_name(enum ibv_wc_status s)
{
    switch (s) {
    case IBV_WC_SUCCESS: return "IBV_WC_SUCCESS";
    case IBV_WC_LOC_LEN_ERR: return "IBV_WC_LOC_LEN_ERR";
    case IBV_WC_LOC_QP_OP_ERR: return "IBV_WC_LOC_QP_OP_ERR";
    case IBV_WC_LOC_PROT_ERR: return "IBV_WC_LOC_PROT_ERR";
    case IBV_WC_WR_FLUSH_ERR: return "IBV_WC_WR_FLUSH_ERR";
    case IBV_WC_REM_INV_REQ_ERR: return "IBV_WC_REM_INV_REQ_ERR";
    case IBV_WC_REM_ACCESS_ERR: return "IBV_WC_REM_ACCESS_ERR";
    case IBV_WC_REM_OP_ERR: return "IBV_WC_REM_OP_ERR";
    case IBV_WC_FATAL_ERR: return "IBV_WC_FATAL_ERR";
    case IBV_WC_GENERAL_ERR: return "IBV_WC_GENERAL_ERR";
    default: return "IBV_WC_OTHER";
    }
}

static const char *event_name(enum ibv_event_type e)
{
    switch (e) {
    case IBV_EVENT_QP_FATAL: return "IBV_EVENT_QP_FATAL";
    case IBV_EVENT_QP_REQ_ERR: return "IBV_EVENT_QP_REQ_ERR";
    case IBV_EVENT_QP_ACCESS_ERR: return "IBV_EVENT_QP_ACCESS_ERR";
    case IBV_EVENT_COMM_EST: return "IBV_EVENT_COMM_EST";
    case IBV_EVENT_SQ_DRAINED: return "IBV_EVENT_SQ_DRAINED";
    case IBV_EVENT_QP_LAST_WQE_REACHED: return "IBV_EVENT_QP_LAST_WQE_REACHED";
    case IBV_EVENT_CQ_ERR: return "IBV_EVENT_CQ_ERR";
    case IBV_EVENT_DEVICE_FATAL: return "IBV_EVENT_DEVICE_FATAL";
    default: return "IBV_EVENT_OTHER";
    }
}

static void die(const char *what)
{
    say("FATAL %s errno=%d (%s)", what, errno, strerror(errno));
    exit(1);
}

/* [guard page][canary][buf: len][canary ... to the page end][guard page] */
static void region_alloc(struct region *r, const char *name, size_t len, int access, int fill)
{
    const size_t page = (size_t)sysconf(_SC_PAGESIZE);
    const size_t body = (canary_size + len + canary_size + page - 1) / page * page;
    r->name = name;
    r->map_len = body + 2 * page;
    r->map = mmap(NULL, r->map_len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (r->map == MAP_FAILED) die("mmap");
    if (mprotect(r->map, page, PROT_NONE) || mprotect(r->map + page + body, page, PROT_NONE))
        die("mprotect");
    r->buf = r->map + page + canary_size;
    r->len = len;
    memset(r->map + page, canary_byte, canary_size);
    memset(r->buf + len, canary_byte, body - canary_size - len);
    if (fill)
        for (size_t i = 0; i < len; ++i) r->buf[i] = (uint8_t)(i * 7 + 3);
    r->mr = ibv_reg_mr(pd, r->buf, len, access);
    if (!r->mr) die("ibv_reg_mr");
}

/* First octet that is not canary, or -1. */
static long region_corrupt(const struct region *r, long *where)
{
    const size_t page = (size_t)sysconf(_SC_PAGESIZE);
    const uint8_t *lo = r->map + page;
    const uint8_t *hi_end = r->map + r->map_len - page;
    for (const uint8_t *p = lo; p < r->buf; ++p)
        if (*p != canary_byte) { *where = (long)(p - r->buf); return 1; }
    for (const uint8_t *p = r->buf + r->len; p < hi_end; ++p)
        if (*p != canary_byte) { *where = (long)(p - r->buf); return 1; }
    return 0;
}

static void check_canaries(int serial)
{
    struct region *all[] = {&rw, &ro, &wo, &big, &recvbuf[0], &recvbuf[1]};
    int bad = 0;
    for (size_t i = 0; i < sizeof(all) / sizeof(all[0]); ++i) {
        long where;
        if (region_corrupt(all[i], &where)) {
            say("CANARY conn=%d CORRUPT region=%s offset=%ld", serial, all[i]->name, where);
            bad = 1;
        }
    }
    if (!bad) say("CANARY conn=%d ok", serial);
}

static struct conn *find_conn(struct rdma_cm_id *id)
{
    for (int i = 0; i < max_conns; ++i)
        if (conns[i] && conns[i]->id == id) return conns[i];
    return NULL;
}

static void drain_cq(struct conn *c)
{
    struct ibv_wc wc[8];
    int n;
    while (c->cq && (n = ibv_poll_cq(c->cq, 8, wc)) > 0) {
        for (int i = 0; i < n; ++i) {
            char hex[2 * 32 + 1] = "";
            if (wc[i].status == IBV_WC_SUCCESS && wc[i].wr_id < recv_slots) {
                const uint32_t k = wc[i].byte_len < 32 ? wc[i].byte_len : 32;
                for (uint32_t j = 0; j < k; ++j)
                    sprintf(hex + 2 * j, "%02x", recvbuf[wc[i].wr_id].buf[j]);
            }
            say("WC conn=%d opcode=%s status=%s byte_len=%u data=%s", c->serial,
                "RECV", wc_status_name(wc[i].status),
                wc[i].byte_len, hex);
        }
    }
}

static void conn_destroy(struct conn *c)
{
    drain_cq(c);
    if (c->id->qp) rdma_destroy_qp(c->id);
    if (c->cq) ibv_destroy_cq(c->cq);
    rdma_destroy_id(c->id);
    check_canaries(c->serial);
    say("DONE conn=%d", c->serial);
    for (int i = 0; i < max_conns; ++i)
        if (conns[i] == c) conns[i] = NULL;
    free(c);
}

/* Value of "key=N" in the peer's private data, or def. */
static int pd_int(const char *pd, const char *key, int def)
{
    const char *p = strstr(pd, key);
    if (!p) return def;
    return atoi(p + strlen(key));
}

static void on_connect_request(struct rdma_cm_event *ev)
{
    char pd_text[256 + 1] = "";  /* private_data_len is 8 bits wide */
    const size_t len = ev->param.conn.private_data_len;
    if (ev->param.conn.private_data) memcpy(pd_text, ev->param.conn.private_data, len);
    for (size_t i = 0; i < len; ++i)
        if (pd_text[i] < 0x20 || pd_text[i] > 0x7e) pd_text[i] = '.';

    struct conn *c = calloc(1, sizeof(*c));
    int slot = -1;
    for (int i = 0; i < max_conns && slot < 0; ++i)
        if (!conns[i]) slot = i;
    if (!c || slot < 0) {
        free(c);
        rdma_reject(ev->id, NULL, 0);
        rdma_destroy_id(ev->id);
        return;
    }
    c->serial = next_serial++;
    c->id = ev->id;
    conns[slot] = c;
    say("REQUEST conn=%d pd=\"%s\"", c->serial, pd_text);

    const int nrecv = pd_int(pd_text, "recv=", recv_slots);
    const int ird = pd_int(pd_text, "ird=", 4);
    c->linger_ms = pd_int(pd_text, "linger=", 0);
    c->cq = ibv_create_cq(ev->id->verbs, 16, NULL, NULL, 0);
    struct ibv_qp_init_attr qa;
    memset(&qa, 0, sizeof(qa));
    qa.send_cq = qa.recv_cq = c->cq;
    qa.qp_type = IBV_QPT_RC;
    qa.cap.max_send_wr = 4;
    qa.cap.max_recv_wr = recv_slots;
    qa.cap.max_send_sge = qa.cap.max_recv_sge = 1;
    if (!c->cq || rdma_create_qp(ev->id, pd, &qa)) {
        say("CM conn=%d event=SETUP_FAILED status=%d", c->serial, errno);
        rdma_reject(ev->id, NULL, 0);
        conn_destroy(c);
        return;
    }
    for (int i = 0; i < nrecv && i < (int)recv_slots; ++i) {
        memset(recvbuf[i].buf, 0, recv_size);
        struct ibv_sge sge = {(uintptr_t)recvbuf[i].buf, recv_size, recvbuf[i].mr->lkey};
        struct ibv_recv_wr wr = {.wr_id = (uint64_t)i, .sg_list = &sge, .num_sge = 1}, *bad;
        if (ibv_post_recv(ev->id->qp, &wr, &bad)) say("CM conn=%d event=POST_RECV_FAILED status=%d", c->serial, errno);
    }
    char info[400];
    snprintf(info, sizeof(info),
             "rw=%x:%llx:%zu ro=%x:%llx:%zu wo=%x:%llx:%zu big=%x:%llx:%zu recv=%d:%d ird=%d",
             rw.mr->rkey, (unsigned long long)(uintptr_t)rw.buf, rw.len, ro.mr->rkey,
             (unsigned long long)(uintptr_t)ro.buf, ro.len, wo.mr->rkey,
             (unsigned long long)(uintptr_t)wo.buf, wo.len, big.mr->rkey,
             (unsigned long long)(uintptr_t)big.buf, big.len, nrecv, recv_size, ird);
    struct rdma_conn_param cp;
    memset(&cp, 0, sizeof(cp));
    cp.responder_resources = (uint8_t)(ird < 0 ? 0 : ird > 255 ? 255 : ird);
    cp.initiator_depth = 4;
    cp.private_data = info;
    cp.private_data_len = (uint8_t)(strlen(info) + 1);
    if (rdma_accept(ev->id, &cp)) {
        say("CM conn=%d event=ACCEPT_FAILED status=%d", c->serial, errno);
        /* The id stays ours: wait for its DISCONNECTED/error event, or clean up now. */
        conn_destroy(c);
    }
}

static void on_async_event(struct ibv_context *ctx);

static void on_cm_event(struct rdma_event_channel *ch)
{
    struct rdma_cm_event *ev;
    while (rdma_get_cm_event(ch, &ev) == 0) {
        if (ev->event == RDMA_CM_EVENT_CONNECT_REQUEST) {
            on_connect_request(ev);
            rdma_ack_cm_event(ev);
            continue;
        }
        struct conn *c = find_conn(ev->id);
        const enum rdma_cm_event_type type = ev->event;
        const int status = ev->status;
        rdma_ack_cm_event(ev);
        if (!c) {
            say("CM conn=? event=%s status=%d", rdma_event_str(type), status);
            continue;
        }
        switch (type) {
        case RDMA_CM_EVENT_ESTABLISHED:
            c->established = 1;
            say("ESTABLISHED conn=%d", c->serial);
            break;
        case RDMA_CM_EVENT_DISCONNECTED:
            /* An async event raised before the disconnect is reported first. */
            on_async_event(c->id->verbs);
            say("DISCONNECTED conn=%d status=%d", c->serial, status);
            drain_cq(c);
            rdma_disconnect(c->id);
            if (c->linger_ms > 0)
                c->destroy_at = now_ms() + c->linger_ms;  /* main loop destroys it */
            else
                conn_destroy(c);
            break;
        case RDMA_CM_EVENT_TIMEWAIT_EXIT:
            break;
        default:
            say("CM conn=%d event=%s status=%d", c->serial, rdma_event_str(type), status);
            conn_destroy(c);
            break;
        }
    }
    if (errno != EAGAIN && errno != EWOULDBLOCK) die("rdma_get_cm_event");
}

static void on_async_event(struct ibv_context *ctx)
{
    struct ibv_async_event ae;
    while (ibv_get_async_event(ctx, &ae) == 0) {
        int serial = 0;
        if (ae.event_type == IBV_EVENT_QP_FATAL || ae.event_type == IBV_EVENT_QP_ACCESS_ERR ||
            ae.event_type == IBV_EVENT_QP_REQ_ERR || ae.event_type == IBV_EVENT_COMM_EST ||
            ae.event_type == IBV_EVENT_QP_LAST_WQE_REACHED || ae.event_type == IBV_EVENT_SQ_DRAINED)
            for (int i = 0; i < max_conns; ++i)
                if (conns[i] && conns[i]->id->qp == ae.element.qp) serial = conns[i]->serial;
        say("ASYNC conn=%d event=%s", serial, event_name(ae.event_type));
        ibv_ack_async_event(&ae);
    }
}

int main(int argc, char **argv)
{
    if (argc != 2) {
        fprintf(stderr, "usage: victim_server PORT\n");
        return 2;
    }
    signal(SIGTERM, on_signal);
    signal(SIGINT, on_signal);
    signal(SIGPIPE, SIG_IGN);

    struct rdma_event_channel *ch = rdma_create_event_channel();
    struct rdma_cm_id *listen_id;
    if (!ch || rdma_create_id(ch, &listen_id, NULL, RDMA_PS_TCP)) die("rdma_create_id");
    struct sockaddr_in a;
    memset(&a, 0, sizeof(a));
    a.sin_family = AF_INET;
    a.sin_port = htons((uint16_t)atoi(argv[1]));
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (rdma_bind_addr(listen_id, (struct sockaddr *)&a)) die("rdma_bind_addr");
    if (!listen_id->verbs) die("no device for 127.0.0.1");
    pd = ibv_alloc_pd(listen_id->verbs);
    if (!pd) die("ibv_alloc_pd");
    region_alloc(&rw, "rw", 2048, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ, 1);
    region_alloc(&ro, "ro", 2048, IBV_ACCESS_REMOTE_READ, 1);
    region_alloc(&wo, "wo", 2048, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE, 1);
    region_alloc(&big, "big", 8u << 20, IBV_ACCESS_REMOTE_READ, 0);
    for (int i = 0; i < recv_slots; ++i) region_alloc(&recvbuf[i], i ? "recv1" : "recv0", recv_size, IBV_ACCESS_LOCAL_WRITE, 0);
    if (rdma_listen(listen_id, 64)) die("rdma_listen");

    fcntl(ch->fd, F_SETFL, fcntl(ch->fd, F_GETFL) | O_NONBLOCK);
    fcntl(listen_id->verbs->async_fd, F_SETFL, fcntl(listen_id->verbs->async_fd, F_GETFL) | O_NONBLOCK);
    say("LISTEN port=%s", argv[1]);

    while (!stop) {
        struct pollfd p[2] = {{ch->fd, POLLIN, 0}, {listen_id->verbs->async_fd, POLLIN, 0}};
        const int n = poll(p, 2, 10);
        if (n < 0 && errno != EINTR) die("poll");
        if (n > 0 && (p[1].revents & POLLIN)) on_async_event(listen_id->verbs);
        for (int i = 0; i < max_conns; ++i) {
            if (!conns[i]) continue;
            drain_cq(conns[i]);
            if (conns[i]->destroy_at && now_ms() >= conns[i]->destroy_at) conn_destroy(conns[i]);
        }
        if (n > 0 && (p[0].revents & POLLIN)) on_cm_event(ch);
    }
    for (int i = 0; i < max_conns; ++i)
        if (conns[i]) conn_destroy(conns[i]);
    struct region *all[] = {&rw, &ro, &wo, &big, &recvbuf[0], &recvbuf[1]};
    for (size_t i = 0; i < sizeof(all) / sizeof(all[0]); ++i) ibv_dereg_mr(all[i]->mr);
    ibv_dealloc_pd(pd);
    rdma_destroy_id(listen_id);
    rdma_destroy_event_channel(ch);
    say("EXIT ok");
    return 0;
}
