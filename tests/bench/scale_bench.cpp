// scale_bench: many RC connections through rdma_cm, as an application would
// open them (distro libibverbs + librdmacm only; run under iwemu-run, or on
// any RDMA device).
//
//   scale_bench server -p PORT [-a ADDR] [-n N] [-t SECONDS]
//   scale_bench client -p PORT [-a ADDR] [-n N] [-w WINDOW] [-d DEPTH] [-s] [-m cm|oob] [-t SECONDS]
//
// The client opens N connections, at most WINDOW of them in setup at a time
// (resolve address, resolve route, connect), each with its own CQ and a QP of
// DEPTH send and DEPTH receive WQEs.  When all are up it sends one message on
// every QP; the server answers each with one message; both check the bytes.
// Then the client disconnects them all.
//
// With -s all QPs share one CQ (size 2 x N x DEPTH, capped at 4M) instead.
// With -m oob (both sides) no rdma_cm is involved: the QP numbers and GIDs
// go over a TCP socket of the benchmark's own on PORT and each QP is moved
// INIT -> RTR (address vector, destination QPN) -> RTS; "setup" then runs
// from the first ibv_create_qp until every QP has moved its message both ways.
//
// Both print "key=value" lines (prefix "client." / "server."): setup time and
// rate, RSS before (device open, PD and buffers registered, no connection)
// and after (all connected, data moved), threads and file descriptors before
// and after, CPU time of setup, the kernel's TCP buffer memory (sockstat,
// netns-wide: not in RSS), and the per-QP memory beyond the queue buffers
// = (RSS after - RSS before - N x queue buffer bytes) / N, where the queue
// buffer bytes are what the emulator preallocates for the granted SQ, RQ and
// CQ sizes (scale_queue_bytes.h; verified by tests/emulator/scale_memory_test).
// Exit status 0 only if every connection came up and every message arrived
// intact.  Every wait is bounded by -t.
#include <arpa/inet.h>
#include <fcntl.h>
#include <infiniband/verbs.h>
#include <netdb.h>
#include <poll.h>
#include <rdma/rdma_cma.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <dirent.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cinttypes>
#include <cstdarg>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <algorithm>
#include <string>
#include <vector>

#include "tests/bench/scale_queue_bytes.h"

namespace {

using Clock = std::chrono::steady_clock;

constexpr uint32_t msg_size = 64;

struct Options {
    bool server = false;
    std::string address = "127.0.0.1";
    std::string port;
    uint32_t connections = 1000;
    uint32_t window = 1000;
    uint32_t depth = 16;
    int timeout_s = 120;
    bool shared_cq = false;  // -s: one CQ for every QP instead of one each
    bool oob = false;        // -m oob: connect by ibv_modify_qp (AV + dest QPN), no rdma_cm
};

enum class ConnState : uint8_t { idle, resolving_addr, resolving_route, connecting, established, exchanged, closed, failed };

struct Conn {
    rdma_cm_id* id = nullptr;
    ibv_qp* qp = nullptr;
    ibv_cq* cq = nullptr;
    ConnState state = ConnState::idle;
    bool recv_done = false;
    bool send_done = false;
    bool disconnected = false;
};

struct ProcSample {
    long rss_kib = 0;
    long threads = 0;
    long fds = 0;
    double cpu_s = 0;
    long tcp_mem_pages = 0;  // /proc/net/sockstat: socket buffers of all TCP sockets in this netns
};

[[noreturn]] void die(const char* fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    std::fprintf(stderr, "scale_bench: ");
    std::vfprintf(stderr, fmt, ap);
    std::fprintf(stderr, "\n");
    va_end(ap);
    std::exit(1);
}

long status_field(const char* name)
{
    FILE* f = std::fopen("/proc/self/status", "r");
    if (!f) return -1;
    char line[256];
    long v = -1;
    const size_t n = std::strlen(name);
    while (std::fgets(line, sizeof line, f))
        if (std::strncmp(line, name, n) == 0 && line[n] == ':') {
            v = std::strtol(line + n + 1, nullptr, 10);
            break;
        }
    std::fclose(f);
    return v;
}

long count_fds()
{
    DIR* d = opendir("/proc/self/fd");
    if (!d) return -1;
    long n = 0;
    while (dirent* e = readdir(d))
        if (e->d_name[0] != '.') ++n;
    closedir(d);
    return n - 1;  // the directory's own fd
}

// Pages the kernel holds in TCP socket buffers, netns-wide (other traffic included).
long tcp_mem_pages()
{
    FILE* f = std::fopen("/proc/net/sockstat", "r");
    if (!f) return -1;
    char line[256];
    long v = -1;
    while (std::fgets(line, sizeof line, f))
        if (const char* m = std::strncmp(line, "TCP:", 4) == 0 ? std::strstr(line, " mem ") : nullptr) {
            v = std::strtol(m + 5, nullptr, 10);
            break;
        }
    std::fclose(f);
    return v;
}

double cpu_seconds()
{
    rusage ru{};
    getrusage(RUSAGE_SELF, &ru);
    return static_cast<double>(ru.ru_utime.tv_sec + ru.ru_stime.tv_sec) +
           static_cast<double>(ru.ru_utime.tv_usec + ru.ru_stime.tv_usec) / 1e6;
}

ProcSample sample()
{
    return {status_field("VmRSS"), status_field("Threads"), count_fds(), cpu_seconds(), tcp_mem_pages()};
}

class Bench {
public:
    explicit Bench(const Options& o) : opt_(o), conns_(o.connections) {}
    int run();      // through rdma_cm
    int run_oob();  // -m oob: ibv_modify_qp with an address vector, no rdma_cm

private:
    int finish();
    void report_figures(const ProcSample& before, const ProcSample& after, double setup_s, double setup_cpu,
                        double exchange_s);
    void create_qp_oob(Conn& c);
    int control_connection();
    void setup_device();
    void poll_events(int timeout_ms);
    void on_cm_event(rdma_cm_event* ev);
    void on_completions(ibv_cq* cq);
    void create_qp(Conn& c, rdma_cm_id* id);
    void post_recv(uint32_t i);
    void post_send(uint32_t i);
    void start_next_connection();
    Conn* conn_of(rdma_cm_id* id);
    uint8_t* recv_buf(uint32_t i) { return buf_.data() + size_t{i} * 2 * msg_size; }
    uint8_t* send_buf(uint32_t i) { return recv_buf(i) + msg_size; }
    void fill(uint8_t* p, uint32_t i, bool reply) const;
    bool deadline_passed() const { return Clock::now() > deadline_; }
    template <typename Pred>
    void wait_until(Pred done, const char* what);
    void report(const char* key, const char* fmt, ...) const;

    Options opt_;
    std::vector<Conn> conns_;
    std::vector<uint8_t> buf_;
    rdma_event_channel* ech_ = nullptr;
    ibv_comp_channel* cch_ = nullptr;
    ibv_context* verbs_ = nullptr;
    ibv_pd* pd_ = nullptr;
    ibv_mr* mr_ = nullptr;
    ibv_cq* shared_cq_ = nullptr;
    rdma_cm_id* listen_id_ = nullptr;
    addrinfo* dst_ = nullptr;
    Clock::time_point deadline_;

    uint32_t started_ = 0;       // client: connections begun
    uint32_t in_setup_ = 0;      // client: connections in setup now
    uint32_t accepted_ = 0;      // server: requests accepted
    uint32_t established_ = 0;
    uint32_t exchanged_ = 0;     // both directions done on the QP
    uint32_t disconnected_ = 0;
    uint32_t failed_ = 0;
    uint32_t bad_data_ = 0;
    Clock::time_point first_request_;     // server: the clock starts here
    Clock::time_point last_established_;
    ibv_qp_cap granted_{};
    uint32_t granted_cqe_ = 0;
};

void Bench::report(const char* key, const char* fmt, ...) const
{
    std::printf("%s.%s=", opt_.server ? "server" : "client", key);
    va_list ap;
    va_start(ap, fmt);
    std::vprintf(fmt, ap);
    va_end(ap);
    std::printf("\n");
}

void Bench::fill(uint8_t* p, uint32_t i, bool reply) const
{
    for (uint32_t k = 0; k < msg_size; ++k) p[k] = static_cast<uint8_t>(i * 7 + k * 13 + (reply ? 101 : 0));
}

Conn* Bench::conn_of(rdma_cm_id* id)
{
    const auto i = reinterpret_cast<uintptr_t>(id->context);
    return i >= 1 && i <= conns_.size() ? &conns_[i - 1] : nullptr;
}

void Bench::setup_device()
{
    int n = 0;
    ibv_context** ctxs = rdma_get_devices(&n);
    if (!ctxs || n < 1) die("no RDMA device (run under iwemu-run)");
    verbs_ = ctxs[0];
    rdma_free_devices(ctxs);
    pd_ = ibv_alloc_pd(verbs_);
    if (!pd_) die("ibv_alloc_pd: %s", std::strerror(errno));
    cch_ = ibv_create_comp_channel(verbs_);
    if (!cch_) die("ibv_create_comp_channel: %s", std::strerror(errno));
    buf_.assign(size_t{opt_.connections} * 2 * msg_size, 0);
    mr_ = ibv_reg_mr(pd_, buf_.data(), buf_.size(), IBV_ACCESS_LOCAL_WRITE);
    if (!mr_) die("ibv_reg_mr: %s", std::strerror(errno));
    ech_ = rdma_create_event_channel();
    if (!ech_) die("rdma_create_event_channel: %s", std::strerror(errno));
    fcntl(ech_->fd, F_SETFL, fcntl(ech_->fd, F_GETFL) | O_NONBLOCK);
    fcntl(cch_->fd, F_SETFL, fcntl(cch_->fd, F_GETFL) | O_NONBLOCK);
    addrinfo hints{};
    hints.ai_family = AF_INET;
    hints.ai_socktype = SOCK_STREAM;
    if (opt_.server) hints.ai_flags = AI_PASSIVE;
    if (int rc = getaddrinfo(opt_.address.c_str(), opt_.port.c_str(), &hints, &dst_))
        die("%s:%s: %s", opt_.address.c_str(), opt_.port.c_str(), gai_strerror(rc));
}

// One CQ per QP (send and receive) or the shared one (-s), notifications on the one channel.
void Bench::create_qp(Conn& c, rdma_cm_id* id)
{
    if (id->verbs != verbs_) die("connection on another device context");
    if (opt_.shared_cq && !shared_cq_) {
        const uint64_t cqe = std::min<uint64_t>(uint64_t{2} * opt_.connections * opt_.depth, 1u << 22);
        shared_cq_ = ibv_create_cq(verbs_, static_cast<int>(cqe), nullptr, cch_, 0);
        if (!shared_cq_) die("ibv_create_cq (shared, %" PRIu64 "): %s", cqe, std::strerror(errno));
        if (ibv_req_notify_cq(shared_cq_, 0)) die("ibv_req_notify_cq: %s", std::strerror(errno));
        granted_cqe_ = static_cast<uint32_t>(shared_cq_->cqe / opt_.connections);  // its share per QP
    }
    if (shared_cq_) {
        c.cq = shared_cq_;
    } else {
        c.cq = ibv_create_cq(verbs_, static_cast<int>(2 * opt_.depth), &c, cch_, 0);
        if (!c.cq) die("ibv_create_cq: %s", std::strerror(errno));
        granted_cqe_ = static_cast<uint32_t>(c.cq->cqe);
        if (ibv_req_notify_cq(c.cq, 0)) die("ibv_req_notify_cq: %s", std::strerror(errno));
    }
    ibv_qp_init_attr ia{};
    ia.send_cq = c.cq;
    ia.recv_cq = c.cq;
    ia.qp_type = IBV_QPT_RC;
    ia.cap.max_send_wr = opt_.depth;
    ia.cap.max_recv_wr = opt_.depth;
    ia.cap.max_send_sge = 1;
    ia.cap.max_recv_sge = 1;
    ia.cap.max_inline_data = 0;
    if (rdma_create_qp(id, pd_, &ia)) die("rdma_create_qp: %s", std::strerror(errno));
    granted_ = ia.cap;
    c.id = id;
    c.qp = id->qp;
}

void Bench::post_recv(uint32_t i)
{
    ibv_sge sge{reinterpret_cast<uintptr_t>(recv_buf(i)), msg_size, mr_->lkey};
    ibv_recv_wr wr{};
    wr.wr_id = i;
    wr.sg_list = &sge;
    wr.num_sge = 1;
    ibv_recv_wr* bad = nullptr;
    if (ibv_post_recv(conns_[i].qp, &wr, &bad)) die("ibv_post_recv #%u: %s", i, std::strerror(errno));
}

void Bench::post_send(uint32_t i)
{
    fill(send_buf(i), i, opt_.server);
    ibv_sge sge{reinterpret_cast<uintptr_t>(send_buf(i)), msg_size, mr_->lkey};
    ibv_send_wr wr{};
    wr.wr_id = i;
    wr.opcode = IBV_WR_SEND;
    wr.sg_list = &sge;
    wr.num_sge = 1;
    wr.send_flags = IBV_SEND_SIGNALED;
    ibv_send_wr* bad = nullptr;
    if (ibv_post_send(conns_[i].qp, &wr, &bad)) die("ibv_post_send #%u: %s", i, std::strerror(errno));
}

void Bench::start_next_connection()
{
    while (started_ < opt_.connections && in_setup_ < opt_.window) {
        const uint32_t i = started_++;
        rdma_cm_id* id = nullptr;
        if (rdma_create_id(ech_, &id, reinterpret_cast<void*>(uintptr_t{i} + 1), RDMA_PS_TCP))
            die("rdma_create_id #%u: %s", i, std::strerror(errno));
        conns_[i].id = id;
        conns_[i].state = ConnState::resolving_addr;
        if (rdma_resolve_addr(id, nullptr, dst_->ai_addr, 2000))
            die("rdma_resolve_addr #%u: %s", i, std::strerror(errno));
        ++in_setup_;
    }
}

void Bench::on_cm_event(rdma_cm_event* ev)
{
    rdma_cm_id* id = ev->id;
    const rdma_cm_event_type type = ev->event;
    const int status = ev->status;
    if (type == RDMA_CM_EVENT_CONNECT_REQUEST) {
        // Server: a new id per request; its context is assigned here.  The
        // request's private data names the client's index of the connection
        // (requests arrive in any order), so both ends expect the same bytes.
        uint32_t i = UINT32_MAX;
        if (ev->param.conn.private_data && ev->param.conn.private_data_len >= sizeof i) {
            std::memcpy(&i, ev->param.conn.private_data, sizeof i);
            i = ntohl(i);
        }
        if (i >= opt_.connections || conns_[i].id) {
            std::fprintf(stderr, "scale_bench: connect request with a bad or repeated index %u\n", i);
            rdma_ack_cm_event(ev);
            rdma_reject(id, nullptr, 0);
            rdma_destroy_id(id);
            ++failed_;
            return;
        }
        if (accepted_++ == 0) first_request_ = Clock::now();
        id->context = reinterpret_cast<void*>(uintptr_t{i} + 1);
        rdma_ack_cm_event(ev);
        create_qp(conns_[i], id);
        post_recv(i);
        conns_[i].state = ConnState::connecting;
        rdma_conn_param cp{};
        cp.responder_resources = 1;
        cp.initiator_depth = 1;
        if (rdma_accept(id, &cp)) die("rdma_accept #%u: %s", i, std::strerror(errno));
        return;
    }
    rdma_ack_cm_event(ev);
    Conn* c = conn_of(id);
    if (!c) return;
    const auto i = static_cast<uint32_t>(c - conns_.data());
    switch (type) {
    case RDMA_CM_EVENT_ADDR_RESOLVED:
        c->state = ConnState::resolving_route;
        if (rdma_resolve_route(id, 2000)) die("rdma_resolve_route #%u: %s", i, std::strerror(errno));
        break;
    case RDMA_CM_EVENT_ROUTE_RESOLVED: {
        create_qp(*c, id);
        post_recv(i);
        c->state = ConnState::connecting;
        const uint32_t index = htonl(i);  // the server uses the same index (see CONNECT_REQUEST)
        rdma_conn_param cp{};
        cp.responder_resources = 1;
        cp.initiator_depth = 1;
        cp.private_data = &index;
        cp.private_data_len = sizeof index;
        if (rdma_connect(id, &cp)) die("rdma_connect #%u: %s", i, std::strerror(errno));
        break;
    }
    case RDMA_CM_EVENT_ESTABLISHED:
        if (c->state != ConnState::exchanged) c->state = ConnState::established;
        ++established_;
        last_established_ = Clock::now();
        if (!opt_.server) {
            --in_setup_;
            start_next_connection();
        }
        break;
    case RDMA_CM_EVENT_DISCONNECTED:
        c->disconnected = true;
        ++disconnected_;
        if (opt_.server) rdma_disconnect(id);  // our half too (no-op if already down)
        break;
    default:
        std::fprintf(stderr, "scale_bench: connection #%u: %s (status %d)\n", i, rdma_event_str(type), status);
        if (c->state != ConnState::failed) {
            if (!opt_.server && c->state != ConnState::established && c->state != ConnState::exchanged) {
                --in_setup_;
                start_next_connection();
            }
            c->state = ConnState::failed;
            ++failed_;
        }
        break;
    }
}

void Bench::on_completions(ibv_cq* cq)
{
    ibv_wc wc[4];
    int n;
    while ((n = ibv_poll_cq(cq, 4, wc)) > 0) {
        for (int k = 0; k < n; ++k) {
            const auto i = static_cast<uint32_t>(wc[k].wr_id);
            if (i >= conns_.size()) die("completion with wr_id %" PRIu64, wc[k].wr_id);
            Conn& c = conns_[i];
            if (wc[k].status != IBV_WC_SUCCESS) {
                std::fprintf(stderr, "scale_bench: QP #%u: %s (%s)\n", i, ibv_wc_status_str(wc[k].status),
                             wc[k].opcode == IBV_WC_RECV ? "receive" : "send");
                if (c.state != ConnState::failed) ++failed_;
                c.state = ConnState::failed;
                continue;
            }
            if (wc[k].opcode == IBV_WC_RECV) {
                uint8_t want[msg_size];
                fill(want, i, !opt_.server);
                if (wc[k].byte_len != msg_size || std::memcmp(want, recv_buf(i), msg_size) != 0) ++bad_data_;
                c.recv_done = true;
                if (opt_.server) post_send(i);  // the answer
            } else {
                c.send_done = true;
            }
            // The passive side may see the data before its ESTABLISHED event
            // (events of the two channels are not ordered): count it anyway.
            if (c.recv_done && c.send_done && c.state != ConnState::failed && c.state != ConnState::exchanged) {
                c.state = ConnState::exchanged;
                ++exchanged_;
            }
        }
    }
    if (n < 0) die("ibv_poll_cq: %d", n);
}

// Everything ready on the CM channel and the completion channel, at most timeout_ms of waiting.
void Bench::poll_events(int timeout_ms)
{
    pollfd p[2] = {{ech_->fd, POLLIN, 0}, {cch_->fd, POLLIN, 0}};
    if (poll(p, 2, timeout_ms) < 0 && errno != EINTR) die("poll: %s", std::strerror(errno));
    rdma_cm_event* ev = nullptr;
    while (rdma_get_cm_event(ech_, &ev) == 0) on_cm_event(ev);
    if (errno != EAGAIN && errno != EWOULDBLOCK) die("rdma_get_cm_event: %s", std::strerror(errno));
    ibv_cq* cq = nullptr;
    void* ctx = nullptr;
    unsigned events = 0;
    while (ibv_get_cq_event(cch_, &cq, &ctx) == 0) {
        // Re-arm before polling: nothing that lands in between is missed.
        ibv_ack_cq_events(cq, 1);
        ++events;
        if (ibv_req_notify_cq(cq, 0)) die("ibv_req_notify_cq: %s", std::strerror(errno));
        on_completions(cq);
    }
}

template <typename Pred>
void Bench::wait_until(Pred done, const char* what)
{
    while (!done()) {
        if (deadline_passed()) {
            // Completions sitting in a CQ whose notification never came?
            const uint32_t before = exchanged_;
            for (auto& c : conns_)
                if (c.cq) on_completions(c.cq);
            if (shared_cq_) on_completions(shared_cq_);
            if (exchanged_ != before)
                std::fprintf(stderr, "scale_bench: %u QP(s) had completions but no CQ event\n", exchanged_ - before);
            int shown = 0;
            for (size_t i = 0; i < conns_.size() && shown < 5; ++i)
                if (conns_[i].state != ConnState::exchanged) {
                    const Conn& c = conns_[i];
                    std::fprintf(stderr, "scale_bench: #%zu state %d receive %s send %s qpn %u\n", i,
                                 static_cast<int>(c.state), c.recv_done ? "done" : "pending",
                                 c.send_done ? "done" : "pending", c.qp ? c.qp->qp_num : 0);
                    ++shown;
                }
            die("timed out waiting for %s: established %u exchanged %u disconnected %u failed %u of %u", what,
                established_, exchanged_, disconnected_, failed_, opt_.connections);
        }
        if (failed_) die("%u connection(s) failed (%s)", failed_, what);
        poll_events(100);
    }
}

// Everything measured once the N QPs are connected and have moved their data.
void Bench::report_figures(const ProcSample& before, const ProcSample& after, double setup_s, double setup_cpu,
                           double exchange_s)
{
    // What an empty ibv_poll_cq costs with all N QPs connected (a busy-polling
    // application pays it on every miss): a CQ of one QP, or the shared CQ.
    double empty_poll_us = 0;
    {
        ibv_cq* cq = shared_cq_ ? shared_cq_ : conns_[0].cq;
        ibv_wc wc;
        constexpr int polls = 2000;
        int got = 0;
        const auto p0 = Clock::now();
        for (int k = 0; k < polls; ++k) got += ibv_poll_cq(cq, 1, &wc);
        empty_poll_us = std::chrono::duration<double, std::micro>(Clock::now() - p0).count() / polls;
        if (got != 0) die("%d unexpected completion(s) after the exchange", got);
    }

    const uint32_t n = opt_.connections;
    const size_t queue_bytes = iwemu::scale::queue_buffer_bytes(granted_.max_send_wr, granted_.max_send_sge,
                                                         granted_.max_inline_data, granted_.max_recv_wr, granted_cqe_);
    const double per_qp = (static_cast<double>(after.rss_kib - before.rss_kib) * 1024.0 -
                           static_cast<double>(n) * static_cast<double>(queue_bytes)) /
                          n;
    report("connections", "%u", n);
    report("connect", "%s", opt_.oob ? "ibv_modify_qp (AV + dest QPN), no rdma_cm" : "rdma_cm");
    if (!opt_.server && !opt_.oob) report("window", "%u", opt_.window);
    report("setup_seconds", "%.3f", setup_s);
    report("connections_per_second", "%.0f", n / setup_s);
    report("setup_cpu_us_per_connection", "%.1f", setup_cpu * 1e6 / n);
    report("exchange_seconds", "%.3f", exchange_s);
    report("cq", "%s", shared_cq_ ? "shared" : "one per QP");
    report("empty_poll_us", "%.2f", empty_poll_us);
    report("queue_caps", "send_wr=%u send_sge=%u inline=%u recv_wr=%u cqe=%u", granted_.max_send_wr,
           granted_.max_send_sge, granted_.max_inline_data, granted_.max_recv_wr, granted_cqe_);
    report("queue_buffer_bytes_per_qp", "%zu", queue_bytes);
    report("rss_before_kib", "%ld", before.rss_kib);
    report("rss_after_kib", "%ld", after.rss_kib);
    report("rss_per_qp_bytes", "%.0f", static_cast<double>(after.rss_kib - before.rss_kib) * 1024.0 / n);
    report("per_qp_beyond_queues_bytes", "%.0f", per_qp);
    report("threads_before", "%ld", before.threads);
    report("threads_after", "%ld", after.threads);
    report("fds_before", "%ld", before.fds);
    report("fds_after", "%ld", after.fds);
    report("kernel_tcp_buffer_kib_before", "%ld", before.tcp_mem_pages * 4);
    report("kernel_tcp_buffer_kib_after", "%ld", after.tcp_mem_pages * 4);
    report("bad_messages", "%u", bad_data_);
    std::fflush(stdout);
}

// Once the QPs are gone: frees what setup_device() (and the listener) made
// and reports the verdict, which is the exit status.
int Bench::finish()
{
    if (listen_id_) rdma_destroy_id(listen_id_);
    ibv_dereg_mr(mr_);
    ibv_destroy_comp_channel(cch_);
    ibv_dealloc_pd(pd_);
    rdma_destroy_event_channel(ech_);
    freeaddrinfo(dst_);
    const bool ok = bad_data_ == 0 && exchanged_ == opt_.connections && failed_ == 0;
    report("result", "%s", ok ? "ok" : "FAILED");
    return ok ? 0 : 1;
}

int Bench::run()
{
    deadline_ = Clock::now() + std::chrono::seconds(opt_.timeout_s);
    setup_device();
    const ProcSample before = sample();
    const uint32_t n = opt_.connections;

    Clock::time_point t0;
    if (opt_.server) {
        if (rdma_create_id(ech_, &listen_id_, nullptr, RDMA_PS_TCP)) die("rdma_create_id: %s", std::strerror(errno));
        if (rdma_bind_addr(listen_id_, dst_->ai_addr)) die("rdma_bind_addr: %s", std::strerror(errno));
        // Room for every request at once: beyond the backlog, rdma_cm (the
        // kernel's and iwemu's alike) refuses a request (ECONNREFUSED).
        const int backlog = static_cast<int>(std::max<uint32_t>(1024, n));
        if (rdma_listen(listen_id_, backlog)) die("rdma_listen: %s", std::strerror(errno));
        std::printf("server.listening=%s:%s\n", opt_.address.c_str(), opt_.port.c_str());
        std::fflush(stdout);
        // The clock starts with the first request.
        wait_until([&] { return accepted_ > 0; }, "the first connection request");
        t0 = first_request_;
    } else {
        t0 = Clock::now();
        start_next_connection();
    }
    wait_until([&] { return established_ == n; }, "connections");
    const double setup_s = std::chrono::duration<double>(last_established_ - t0).count();
    const double setup_cpu = cpu_seconds() - before.cpu_s;

    // One message each way on every QP: the client speaks first.
    const auto t1 = Clock::now();
    if (!opt_.server)
        for (uint32_t i = 0; i < n; ++i) post_send(i);
    wait_until([&] { return exchanged_ == n; }, "messages");
    const double exchange_s = std::chrono::duration<double>(Clock::now() - t1).count();
    const ProcSample after = sample();

    report_figures(before, after, setup_s, setup_cpu, exchange_s);

    // Teardown: the client closes, the server follows each DISCONNECTED.
    const auto t2 = Clock::now();
    if (!opt_.server)
        for (auto& c : conns_) rdma_disconnect(c.id);
    wait_until([&] { return disconnected_ == n; }, "disconnects");
    for (auto& c : conns_) {
        rdma_destroy_qp(c.id);
        if (!shared_cq_ && ibv_destroy_cq(c.cq)) die("ibv_destroy_cq: %s", std::strerror(errno));
        rdma_destroy_id(c.id);
    }
    if (shared_cq_ && ibv_destroy_cq(shared_cq_)) die("ibv_destroy_cq: %s", std::strerror(errno));
    report("teardown_seconds", "%.3f", std::chrono::duration<double>(Clock::now() - t2).count());
    return finish();
}

// ---- without rdma_cm: QP numbers swapped over a TCP socket of our own, then
// INIT -> RTR (address vector + destination QPN) -> RTS, as perftest without
// -R and ibv_rc_pingpong do (docs/oob-connect.md).

void Bench::create_qp_oob(Conn& c)
{
    c.cq = ibv_create_cq(verbs_, static_cast<int>(2 * opt_.depth), &c, cch_, 0);
    if (!c.cq) die("ibv_create_cq: %s", std::strerror(errno));
    granted_cqe_ = static_cast<uint32_t>(c.cq->cqe);
    if (ibv_req_notify_cq(c.cq, 0)) die("ibv_req_notify_cq: %s", std::strerror(errno));
    ibv_qp_init_attr ia{};
    ia.send_cq = ia.recv_cq = c.cq;
    ia.qp_type = IBV_QPT_RC;
    ia.cap = {opt_.depth, opt_.depth, 1, 1, 0};
    c.qp = ibv_create_qp(pd_, &ia);
    if (!c.qp) die("ibv_create_qp: %s", std::strerror(errno));
    granted_ = ia.cap;
    ibv_qp_attr a{};
    a.qp_state = IBV_QPS_INIT;
    a.port_num = 1;
    a.qp_access_flags = IBV_ACCESS_LOCAL_WRITE;
    if (ibv_modify_qp(c.qp, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS))
        die("ibv_modify_qp INIT: %s", std::strerror(errno));
}

// The control socket: server accepts one client, the client retries a refused connect.
int Bench::control_connection()
{
    int fd = socket(dst_->ai_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0) die("socket: %s", std::strerror(errno));
    if (opt_.server) {
        int one = 1;
        setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
        if (bind(fd, dst_->ai_addr, dst_->ai_addrlen) || listen(fd, 1)) die("control listen: %s", std::strerror(errno));
        std::printf("server.listening=%s:%s\n", opt_.address.c_str(), opt_.port.c_str());
        std::fflush(stdout);
        pollfd p{fd, POLLIN, 0};
        if (poll(&p, 1, opt_.timeout_s * 1000) != 1) die("no client on the control port");
        const int c = accept4(fd, nullptr, nullptr, SOCK_CLOEXEC);
        if (c < 0) die("accept: %s", std::strerror(errno));
        close(fd);
        return c;
    }
    while (connect(fd, dst_->ai_addr, dst_->ai_addrlen) != 0) {
        if (errno != ECONNREFUSED || deadline_passed()) die("control connect: %s", std::strerror(errno));
        close(fd);
        usleep(20000);
        fd = socket(dst_->ai_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
    }
    return fd;
}

void xfer(int fd, void* p, size_t n, bool out, int timeout_s)
{
    auto* b = static_cast<uint8_t*>(p);
    while (n) {
        pollfd q{fd, static_cast<short>(out ? POLLOUT : POLLIN), 0};
        if (poll(&q, 1, timeout_s * 1000) != 1) die("control socket: timeout");
        const ssize_t k = out ? send(fd, b, n, MSG_NOSIGNAL) : recv(fd, b, n, 0);
        if (k <= 0) die("control socket: %s", k == 0 ? "closed by the peer" : std::strerror(errno));
        b += k;
        n -= static_cast<size_t>(k);
    }
}

int Bench::run_oob()
{
    deadline_ = Clock::now() + std::chrono::seconds(opt_.timeout_s);
    setup_device();
    const uint32_t n = opt_.connections;
    ibv_gid gid{};
    if (ibv_query_gid(verbs_, 1, 0, &gid)) die("ibv_query_gid: %s", std::strerror(errno));
    const int ctl = control_connection();
    const ProcSample before = sample();

    // The clock runs from the first ibv_create_qp until every QP has moved
    // its message both ways (there is no "established" event without rdma_cm).
    const auto t0 = Clock::now();
    std::vector<uint32_t> mine(n), theirs(n);
    for (uint32_t i = 0; i < n; ++i) {
        create_qp_oob(conns_[i]);
        post_recv(i);
        mine[i] = conns_[i].qp->qp_num;
    }
    uint32_t peer_n = 0;
    ibv_gid peer_gid{};
    // The client speaks first, so neither side can block on a full socket.
    for (int turn = 0; turn < 2; ++turn) {
        if ((turn == 0) != opt_.server) {
            uint32_t count = n;
            xfer(ctl, &count, sizeof count, true, opt_.timeout_s);
            xfer(ctl, gid.raw, sizeof gid.raw, true, opt_.timeout_s);
            xfer(ctl, mine.data(), n * sizeof(uint32_t), true, opt_.timeout_s);
        } else {
            xfer(ctl, &peer_n, sizeof peer_n, false, opt_.timeout_s);
            if (peer_n != n) die("peer has %u QPs, we have %u", peer_n, n);
            xfer(ctl, peer_gid.raw, sizeof peer_gid.raw, false, opt_.timeout_s);
            xfer(ctl, theirs.data(), n * sizeof(uint32_t), false, opt_.timeout_s);
        }
    }
    for (uint32_t i = 0; i < n; ++i) {
        ibv_qp_attr a{};
        a.qp_state = IBV_QPS_RTR;
        a.path_mtu = IBV_MTU_1024;
        a.dest_qp_num = theirs[i];
        a.max_dest_rd_atomic = 1;
        a.min_rnr_timer = 12;
        a.ah_attr.is_global = 1;
        a.ah_attr.grh.dgid = peer_gid;
        a.ah_attr.grh.sgid_index = 0;
        a.ah_attr.grh.hop_limit = 0xFF;
        a.ah_attr.port_num = 1;
        if (ibv_modify_qp(conns_[i].qp, &a,
                          IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN |
                              IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER))
            die("ibv_modify_qp RTR #%u: %s", i, std::strerror(errno));
        ibv_qp_attr r{};
        r.qp_state = IBV_QPS_RTS;
        r.timeout = 14;
        r.retry_cnt = 7;
        r.rnr_retry = 7;
        r.max_rd_atomic = 1;
        if (ibv_modify_qp(conns_[i].qp, &r,
                          IBV_QP_STATE | IBV_QP_SQ_PSN | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY |
                              IBV_QP_MAX_QP_RD_ATOMIC))
            die("ibv_modify_qp RTS #%u: %s", i, std::strerror(errno));
        conns_[i].state = ConnState::established;
        ++established_;
        // A Send posted now waits in the SQ until the connection exists.
        if (!opt_.server) post_send(i);
    }
    wait_until([&] { return exchanged_ == n; }, "messages");
    const double setup_s = std::chrono::duration<double>(Clock::now() - t0).count();
    const double setup_cpu = cpu_seconds() - before.cpu_s;
    const ProcSample after = sample();
    report_figures(before, after, setup_s, setup_cpu, 0.0);

    // Both sides are done before either destroys a QP (an abortive close
    // could overtake the peer's last message).
    uint8_t done = 1, peer_done = 0;
    xfer(ctl, &done, 1, true, opt_.timeout_s);
    xfer(ctl, &peer_done, 1, false, opt_.timeout_s);
    close(ctl);
    const auto t2 = Clock::now();
    for (auto& c : conns_) {
        if (ibv_destroy_qp(c.qp)) die("ibv_destroy_qp: %s", std::strerror(errno));
        if (ibv_destroy_cq(c.cq)) die("ibv_destroy_cq: %s", std::strerror(errno));
    }
    report("teardown_seconds", "%.3f", std::chrono::duration<double>(Clock::now() - t2).count());
    return finish();
}

void usage()
{
    std::fprintf(stderr,
                 "usage: scale_bench server|client -p PORT [-a ADDR] [-n CONNECTIONS] [-w WINDOW] [-d DEPTH] [-s] [-m cm|oob] [-t SECONDS]\n");
    std::exit(2);
}

uint32_t number(const char* s, uint32_t lo, uint32_t hi)
{
    char* end = nullptr;
    const unsigned long v = std::strtoul(s, &end, 10);
    if (!*s || *end || v < lo || v > hi) {
        std::fprintf(stderr, "scale_bench: %s: want a number in %u..%u\n", s, lo, hi);
        usage();
    }
    return static_cast<uint32_t>(v);
}

}  // namespace

int main(int argc, char** argv)
{
    if (argc < 2) usage();
    Options o;
    if (std::strcmp(argv[1], "server") == 0)
        o.server = true;
    else if (std::strcmp(argv[1], "client") != 0)
        usage();
    bool window_given = false;
    for (int k = 2; k < argc; ++k) {
        const std::string a = argv[k];
        if (a == "-m") {
            if (k + 1 >= argc) usage();
            const std::string m = argv[++k];
            if (m == "oob") o.oob = true;
            else if (m != "cm") usage();
            continue;
        }
        if (a == "-s") {
            o.shared_cq = true;
            continue;
        }
        if (k + 1 >= argc) usage();
        const char* v = argv[++k];
        if (a == "-p") o.port = v;
        else if (a == "-a") o.address = v;
        else if (a == "-n") o.connections = number(v, 1, 100000);
        else if (a == "-w") { o.window = number(v, 1, 100000); window_given = true; }
        else if (a == "-d") o.depth = number(v, 1, 4096);
        else if (a == "-t") o.timeout_s = static_cast<int>(number(v, 1, 3600));
        else usage();
    }
    if (o.port.empty()) usage();
    if (!window_given) o.window = o.connections;
    if (o.oob && o.shared_cq) usage();
    Bench b(o);
    return o.oob ? b.run_oob() : b.run();
}
