// pattern_lat: the round trip of N posted work requests, for the ways real
// applications wait for the answer (issue 25).
//
// The client posts N work requests, one ibv_post_send() each: N-1 RDMA
// Writes of SIZE octets and last an inline 8-octet Write of a sequence
// number into the server's flag word.  The server spins on that word, then
// answers with one post of two work requests: an 8-octet Write of the same
// number into the client's flag word and an 8-octet Send.  The client waits
// for the answer in one of four patterns:
//   spin      spins on its flag word, no verbs call (ib_write_lat, riostream);
//   poll      polls the receive CQ until the Send's completion;
//   prearmed  ibv_req_notify_cq before posting, then blocks in
//             ibv_get_cq_event (the usual event loop: arm, post, sleep);
//   armafter  posts, then arms, polls once, and only then blocks.
// Every round trip is timed on its own; a row per pattern and N gives the
// median, mean and 99th percentile in microseconds.  A transport that holds
// posted work back for a timer shows it as a cliff in N.
//
//   pattern_lat [-p PORT] [-s SIZE] [-n ITERS] [-N 1,2,...] [-P spin,poll,...]            server
//   pattern_lat [-p PORT] [-s SIZE] [-n ITERS] [-N ...] [-P ...] [--max-median-us U] HOST  client
//
// Client output: "pattern_lat PATTERN N median_us mean_us p99_us", one line
// each.  With --max-median-us the client exits 1 when any row's median is
// above U (the cliff check of tests/bench/pattern_lat.sh).
#include <infiniband/verbs.h>
#include <rdma/rdma_cma.h>
#include <rdma/rdma_verbs.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cinttypes>
#include <cstdarg>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

namespace {

using Clock = std::chrono::steady_clock;

enum class Pattern { spin, poll, prearmed, armafter };
constexpr const char* pattern_names[] = {"spin", "poll", "prearmed", "armafter"};

struct Options {
    std::string host;  // empty: server
    std::string port = "18620";
    uint32_t size = 64;
    int iters = 200;
    std::vector<int> counts = {1, 2, 4, 8, 9, 12, 16, 24, 32, 48, 64};
    std::vector<Pattern> patterns = {Pattern::spin, Pattern::poll, Pattern::prearmed, Pattern::armafter};
    double max_median_us = 0;  // 0: no check
};

constexpr int max_count = 64;
constexpr int warmup_iters = 10;
constexpr uint64_t stop_seq = UINT64_MAX;
constexpr auto stall_limit = std::chrono::seconds(20);  // the peer is gone

[[noreturn]] void die(const char* fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    std::fprintf(stderr, "pattern_lat: ");
    std::vfprintf(stderr, fmt, ap);
    std::fprintf(stderr, "\n");
    va_end(ap);
    std::exit(2);
}

[[noreturn]] void usage()
{
    std::fprintf(stderr,
                 "usage: pattern_lat [-p PORT] [-s SIZE] [-n ITERS] [-N COUNTS] [-P PATTERNS] "
                 "[--max-median-us U] [HOST]\n");
    std::exit(2);
}

std::vector<std::string> split(const std::string& s)
{
    std::vector<std::string> out;
    size_t at = 0;
    while (at <= s.size()) {
        const size_t comma = s.find(',', at);
        out.push_back(s.substr(at, comma == std::string::npos ? std::string::npos : comma - at));
        if (comma == std::string::npos) break;
        at = comma + 1;
    }
    return out;
}

Options parse(int argc, char** argv)
{
    Options o;
    for (int i = 1; i < argc; ++i) {
        const std::string a = argv[i];
        auto value = [&]() -> std::string {
            if (i + 1 >= argc) usage();
            return argv[++i];
        };
        if (a == "-p") {
            o.port = value();
        } else if (a == "-s") {
            o.size = static_cast<uint32_t>(std::strtoul(value().c_str(), nullptr, 0));
        } else if (a == "-n") {
            o.iters = std::atoi(value().c_str());
        } else if (a == "-N") {
            o.counts.clear();
            for (const auto& c : split(value())) o.counts.push_back(std::atoi(c.c_str()));
        } else if (a == "-P") {
            o.patterns.clear();
            for (const auto& p : split(value())) {
                const auto* it = std::find_if(std::begin(pattern_names), std::end(pattern_names),
                                              [&](const char* n) { return p == n; });
                if (it == std::end(pattern_names)) usage();
                o.patterns.push_back(static_cast<Pattern>(it - std::begin(pattern_names)));
            }
        } else if (a == "--max-median-us") {
            o.max_median_us = std::atof(value().c_str());
        } else if (!a.empty() && a[0] != '-' && o.host.empty()) {
            o.host = a;
        } else {
            usage();
        }
    }
    if (o.size == 0 || o.size > (1u << 20) || o.iters <= 0 || o.counts.empty() || o.patterns.empty()) usage();
    for (int c : o.counts)
        if (c < 1 || c > max_count) usage();
    return o;
}

// Where each side's peer may write: its flag word, then the data area.
struct RemoteBuffer {
    uint64_t addr;
    uint32_t rkey;
    uint32_t pad;
};

struct Side {
    rdma_cm_id* id = nullptr;
    ibv_pd* pd = nullptr;
    ibv_comp_channel* channel = nullptr;
    ibv_cq* scq = nullptr;
    ibv_cq* rcq = nullptr;
    std::vector<uint8_t> buf;  // [0, 8) flag, [64, 128) receive, [128, ...) data
    ibv_mr* mr = nullptr;
    RemoteBuffer peer{};

    volatile uint64_t* flag() { return reinterpret_cast<volatile uint64_t*>(buf.data()); }
    uint8_t* recv_area() { return buf.data() + 64; }
    uint8_t* data() { return buf.data() + 128; }

    void create_qp(rdma_cm_id* on, uint32_t size)
    {
        id = on;
        buf.assign(128 + size_t{size} * max_count, 0);
        pd = ibv_alloc_pd(id->verbs);
        if (!pd) die("ibv_alloc_pd: %s", std::strerror(errno));
        mr = ibv_reg_mr(pd, buf.data(), buf.size(),
                        IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ);
        if (!mr) die("ibv_reg_mr: %s", std::strerror(errno));
        channel = ibv_create_comp_channel(id->verbs);
        if (!channel) die("ibv_create_comp_channel: %s", std::strerror(errno));
        scq = ibv_create_cq(id->verbs, 4 * max_count, nullptr, channel, 0);
        rcq = ibv_create_cq(id->verbs, 4 * max_count, nullptr, channel, 0);
        if (!scq || !rcq) die("ibv_create_cq: %s", std::strerror(errno));
        ibv_qp_init_attr a{};
        a.send_cq = scq;
        a.recv_cq = rcq;
        a.qp_type = IBV_QPT_RC;
        a.cap.max_send_wr = 4 * max_count;
        a.cap.max_recv_wr = 16;
        a.cap.max_send_sge = 1;
        a.cap.max_recv_sge = 1;
        a.cap.max_inline_data = 64;
        if (rdma_create_qp(id, pd, &a)) die("rdma_create_qp: %s", std::strerror(errno));
    }

    void post_recv()
    {
        ibv_sge sge{reinterpret_cast<uintptr_t>(recv_area()), 64, mr->lkey};
        ibv_recv_wr wr{};
        wr.sg_list = &sge;
        wr.num_sge = 1;
        ibv_recv_wr* bad = nullptr;
        if (ibv_post_recv(id->qp, &wr, &bad)) die("ibv_post_recv: %s", std::strerror(errno));
    }

    // One work request, its own ibv_post_send().
    void post(ibv_wr_opcode op, const void* src, uint32_t len, uint64_t remote, uint32_t flags)
    {
        ibv_sge sge{reinterpret_cast<uintptr_t>(src), len, mr->lkey};
        ibv_send_wr wr{};
        wr.opcode = op;
        wr.sg_list = &sge;
        wr.num_sge = 1;
        wr.send_flags = flags;
        wr.wr.rdma.remote_addr = remote;
        wr.wr.rdma.rkey = peer.rkey;
        ibv_send_wr* bad = nullptr;
        if (ibv_post_send(id->qp, &wr, &bad)) die("ibv_post_send: %s", std::strerror(errno));
    }

    // Busy-polls `cq` for one completion, which must be a success.
    void reap(ibv_cq* cq, Clock::time_point deadline)
    {
        ibv_wc wc{};
        int n;
        while ((n = ibv_poll_cq(cq, 1, &wc)) == 0)
            if (Clock::now() > deadline) die("no completion for %lld s", static_cast<long long>(stall_limit.count()));
        if (n < 0) die("ibv_poll_cq: %d", n);
        if (wc.status != IBV_WC_SUCCESS) die("completion: %s", ibv_wc_status_str(wc.status));
    }

    // Sends this side's buffer to the peer and learns the peer's.
    void exchange_buffers()
    {
        const RemoteBuffer mine{reinterpret_cast<uintptr_t>(buf.data()), mr->rkey, 0};
        std::memcpy(data(), &mine, sizeof mine);
        post(IBV_WR_SEND, data(), sizeof mine, 0, IBV_SEND_SIGNALED);
        const auto deadline = Clock::now() + stall_limit;
        reap(scq, deadline);
        reap(rcq, deadline);
        std::memcpy(&peer, recv_area(), sizeof peer);
        std::memset(data(), 0, sizeof mine);
    }
};

rdma_addrinfo* resolve(const Options& o, bool passive)
{
    rdma_addrinfo hints{};
    hints.ai_port_space = RDMA_PS_TCP;
    if (passive) hints.ai_flags = RAI_PASSIVE;
    rdma_addrinfo* res = nullptr;
    if (rdma_getaddrinfo(passive ? nullptr : o.host.c_str(), o.port.c_str(), &hints, &res))
        die("rdma_getaddrinfo: %s", std::strerror(errno));
    return res;
}

// Waits until the client's flag write reaches at least `seq`.
uint64_t wait_flag(Side& s, uint64_t seq)
{
    const auto deadline = Clock::now() + stall_limit;
    uint64_t v;
    for (unsigned spins = 0; (v = *s.flag()) < seq; ++spins)
        if ((spins & 0xfff) == 0 && Clock::now() > deadline) die("the client went quiet");
    return v;
}

int serve(const Options& o)
{
    rdma_addrinfo* res = resolve(o, true);
    rdma_cm_id* listen_id = nullptr;
    if (rdma_create_ep(&listen_id, res, nullptr, nullptr)) die("rdma_create_ep: %s", std::strerror(errno));
    rdma_freeaddrinfo(res);
    if (rdma_listen(listen_id, 1)) die("rdma_listen: %s", std::strerror(errno));
    rdma_cm_id* id = nullptr;
    if (rdma_get_request(listen_id, &id)) die("rdma_get_request: %s", std::strerror(errno));
    Side s;
    s.create_qp(id, o.size);
    s.post_recv();
    if (rdma_accept(id, nullptr)) die("rdma_accept: %s", std::strerror(errno));
    s.exchange_buffers();
    // Answer every flag value: a Write of it back, then a Send, one post.
    uint64_t* answer = reinterpret_cast<uint64_t*>(s.data());
    for (uint64_t seq = 1;; ++seq) {
        const uint64_t v = wait_flag(s, seq);
        if (v == stop_seq) break;
        answer[0] = v;
        ibv_sge sge[2] = {{reinterpret_cast<uintptr_t>(answer), 8, s.mr->lkey},
                          {reinterpret_cast<uintptr_t>(answer), 8, s.mr->lkey}};
        ibv_send_wr wr[2]{};
        wr[0].opcode = IBV_WR_RDMA_WRITE;
        wr[0].sg_list = &sge[0];
        wr[0].num_sge = 1;
        wr[0].send_flags = IBV_SEND_INLINE;
        wr[0].wr.rdma.remote_addr = s.peer.addr;
        wr[0].wr.rdma.rkey = s.peer.rkey;
        wr[0].next = &wr[1];
        wr[1].opcode = IBV_WR_SEND;
        wr[1].sg_list = &sge[1];
        wr[1].num_sge = 1;
        wr[1].send_flags = IBV_SEND_INLINE | IBV_SEND_SIGNALED;
        ibv_send_wr* bad = nullptr;
        if (ibv_post_send(id->qp, wr, &bad)) die("ibv_post_send: %s", std::strerror(errno));
        s.reap(s.scq, Clock::now() + stall_limit);
    }
    rdma_disconnect(id);
    return 0;
}

// Blocks in ibv_get_cq_event until the receive CQ has the answer.
void wait_event(Side& s, bool armed)
{
    ibv_wc wc{};
    for (;;) {
        if (!armed) {
            if (ibv_req_notify_cq(s.rcq, 0)) die("ibv_req_notify_cq: %s", std::strerror(errno));
        }
        armed = false;
        const int n = ibv_poll_cq(s.rcq, 1, &wc);  // closes the race with an answer before the arm
        if (n < 0) die("ibv_poll_cq: %d", n);
        if (n == 1) break;
        ibv_cq* cq = nullptr;
        void* ctx = nullptr;
        if (ibv_get_cq_event(s.channel, &cq, &ctx)) die("ibv_get_cq_event: %s", std::strerror(errno));
        ibv_ack_cq_events(cq, 1);
    }
    if (wc.status != IBV_WC_SUCCESS) die("receive: %s", ibv_wc_status_str(wc.status));
}

struct Row {
    double median, mean, p99;
};

Row summarize(std::vector<double> us)
{
    std::sort(us.begin(), us.end());
    double sum = 0;
    for (double v : us) sum += v;
    return {us[us.size() / 2], sum / static_cast<double>(us.size()), us[(us.size() * 99) / 100]};
}

int run_client(const Options& o)
{
    rdma_addrinfo* res = resolve(o, false);
    rdma_cm_id* id = nullptr;
    if (rdma_create_ep(&id, res, nullptr, nullptr)) die("rdma_create_ep: %s", std::strerror(errno));
    rdma_freeaddrinfo(res);
    Side s;
    s.create_qp(id, o.size);
    s.post_recv();
    if (rdma_connect(id, nullptr)) die("rdma_connect: %s", std::strerror(errno));
    s.exchange_buffers();
    for (int i = 0; i < 8; ++i) s.post_recv();

    uint64_t seq = 0;
    uint64_t* seq_src = reinterpret_cast<uint64_t*>(s.recv_area() + 32);  // inline: copied at post
    const uint64_t peer_data = s.peer.addr + 128;
    bool cliff = false;
    for (Pattern p : o.patterns) {
        for (int n : o.counts) {
            std::vector<double> us;
            us.reserve(static_cast<size_t>(o.iters));
            for (int it = 0; it < warmup_iters + o.iters; ++it) {
                ++seq;
                *seq_src = seq;
                if (p == Pattern::prearmed && ibv_req_notify_cq(s.rcq, 0))
                    die("ibv_req_notify_cq: %s", std::strerror(errno));
                const auto t0 = Clock::now();
                for (int w = 0; w + 1 < n; ++w)
                    s.post(IBV_WR_RDMA_WRITE, s.data() + size_t{o.size} * w, o.size, peer_data + uint64_t{o.size} * w,
                           0);
                s.post(IBV_WR_RDMA_WRITE, seq_src, 8, s.peer.addr, IBV_SEND_INLINE | IBV_SEND_SIGNALED);
                const auto deadline = t0 + stall_limit;
                switch (p) {
                case Pattern::spin:
                    for (unsigned spins = 0; *s.flag() != seq; ++spins)
                        if ((spins & 0xfff) == 0 && Clock::now() > deadline) die("no answer (spin, N=%d)", n);
                    break;
                case Pattern::poll: s.reap(s.rcq, deadline); break;
                case Pattern::prearmed: wait_event(s, true); break;
                case Pattern::armafter: wait_event(s, false); break;
                }
                const auto t1 = Clock::now();
                if (p == Pattern::spin) s.reap(s.rcq, deadline);  // the answer's Send, not timed
                s.post_recv();
                s.reap(s.scq, deadline);  // the signaled flag Write
                if (it >= warmup_iters) us.push_back(std::chrono::duration<double, std::micro>(t1 - t0).count());
            }
            const Row r = summarize(std::move(us));
            std::printf("pattern_lat %s %d %.2f %.2f %.2f\n", pattern_names[static_cast<int>(p)], n, r.median, r.mean,
                        r.p99);
            std::fflush(stdout);
            if (o.max_median_us > 0 && r.median > o.max_median_us) {
                std::fprintf(stderr, "pattern_lat: %s N=%d: median %.2f us above %.2f us\n",
                             pattern_names[static_cast<int>(p)], n, r.median, o.max_median_us);
                cliff = true;
            }
        }
    }
    *seq_src = stop_seq;
    s.post(IBV_WR_RDMA_WRITE, seq_src, 8, s.peer.addr, IBV_SEND_INLINE | IBV_SEND_SIGNALED);
    s.reap(s.scq, Clock::now() + stall_limit);
    rdma_disconnect(id);
    return cliff ? 1 : 0;
}

}  // namespace

int main(int argc, char** argv)
{
    const Options o = parse(argc, argv);
    return o.host.empty() ? serve(o) : run_client(o);
}
