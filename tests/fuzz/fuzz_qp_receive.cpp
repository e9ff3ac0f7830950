// libFuzzer target: fuzzed octets on the wire of a connected QP in RTS, with
// registered memory around it.  Everything from the socket read to placement,
// delivery, Read Responses and the Terminate goes through the real emulator
// (engine thread, real loopback TCP).
//
// Input: 2 selector octets, then the octets the peer "sends" (FPDUs as they
// are on the wire: MPA framing, markers and CRC included).
//   [0] bit0 CRC on, bit1 markers on (peer -> QP direction),
//       bit2 SRQ instead of the QP's RQ, bit3 QP is the Responder,
//       bits4-5 Responder expects an RTR (none, zero-length Send/Write/Read),
//       bit6 post an RDMA Read first (its Response can be placed),
//       bit7 receive WQEs with 3 SGEs and gaps (else 1 SGE)
//   [1] bits0-2 IRD - 1, bits3-5 receive WQEs posted (0..7),
//       bit6 WQE 0 names a region without local write, bit7 one of another PD
//
// Memory: one arena at a fixed address (so Tagged Offsets in the seed corpus
// stay valid), guard pages at both ends, a canary band between regions.  The
// receive buffers and the Read sink sit in regions registered at an iova
// other than their address, as zero-based / ibv_reg_mr_iova regions are.
// STags repeat from run to run (Config::stag_key_seed); the table is checked
// at start-up against the one tests/fuzz/make_corpus.py writes seeds for.
//
// Checks per input: the QP ends (ERROR, socket closed) within a deadline;
// no octet changes outside the ranges the peer may legitimately write (the
// remote-writable regions, the posted receive SGEs, the Read's sink); every
// posted receive completes once, a successful one within its length; the
// Read completes once.  ASan/UBSan catch the rest.
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <unistd.h>

#include <arpa/inet.h>

#include <array>
#include <chrono>
#include <cstdarg>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <vector>

#include "emulator/emulator.h"

using namespace iwemu;

namespace {

// ---- fixed layout (mirrored in make_corpus.py) ------------------------------
constexpr uint32_t stag_key_seed = 0x1F00D;
constexpr uintptr_t arena_address = 0x200000000000;  // above ASan's shadow, below its heap
constexpr size_t page = 4096;
constexpr size_t region_size = 4096;
constexpr size_t band = 512;  // canary octets before/after each region

enum Region : int { W, Z, R, N, P, RECV, SINK, region_count };
// iova: the region's first Tagged Offset; use_address: its host address
// (ibv_reg_mr), else `iova` (zero-based or ibv_reg_mr_iova regions: the
// local SGEs then name Tagged Offsets too, which the data path translates).
struct RegionSpec {
    const char* name;
    uint32_t access;
    bool other_pd;
    bool use_address;
    uint64_t iova;
};
constexpr RegionSpec specs[region_count] = {
    {"W (remote write+read+atomic)", access_local_write | access_remote_write | access_remote_read | access_remote_atomic,
     false, true, 0},
    {"Z (zero-based, remote write)", access_local_write | access_remote_write | access_zero_based, false, false, 0},
    {"R (remote read only)", access_remote_read, false, true, 0},
    {"N (no remote rights)", access_local_write, false, true, 0},
    {"P (other PD)", access_local_write | access_remote_write | access_remote_read, true, true, 0},
    {"RECV (receive buffers, iova 0x70000000)", access_local_write, false, false, 0x70000000},
    {"SINK (Read sink, zero-based)", access_local_write | access_zero_based, false, false, 0},
};
// STags the seed corpus uses: index i+1, key from the fixed seed.
constexpr uint32_t expected_stags[region_count] = {0x105, 0x249, 0x305, 0x4EA, 0x5D1, 0x6C2, 0x73C};

constexpr size_t arena_size = page + region_count * (band + region_size) + band + page;
constexpr size_t region_offset(int r) { return page + band + static_cast<size_t>(r) * (band + region_size); }

// Receive WQE i: 512 octets of RECV; 1 SGE [0,400) or 3 SGEs with gaps.
constexpr uint32_t max_recv = 7;
constexpr size_t wqe_stride = 512;
struct Range {
    size_t off, len;
};
constexpr Range sge_single[] = {{0, 400}};
constexpr Range sge_multi[] = {{0, 100}, {128, 1}, {256, 144}};
constexpr size_t sink_offset = 64, sink_length = 1024;
constexpr uint64_t read_wr_id = 0xEADu;

[[noreturn]] void fail(const char* fmt, ...) __attribute__((format(printf, 1, 2)));
void fail(const char* fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    std::fputs("fuzz_qp_receive: ", stderr);
    std::vfprintf(stderr, fmt, ap);
    std::fputc('\n', stderr);
    va_end(ap);
    std::abort();
}

uint8_t* arena;
std::vector<uint8_t> reference;  // what the arena must hold outside writable ranges

struct Device {
    std::unique_ptr<Emulator> emu;
    ProtectionDomain* pd = nullptr;
    ProtectionDomain* other_pd = nullptr;
    CompletionQueue* scq = nullptr;
    CompletionQueue* rcq = nullptr;
    MemoryRegion* mr[region_count]{};
};
Device* dev;
int listener = -1;
uint16_t listen_port = 0;

uint8_t* region(int r) { return arena + region_offset(r); }
// What a local SGE or a Tagged Offset names octet `off` of region r by.
uint64_t tagged_offset(int r, size_t off)
{
    return (specs[r].use_address ? reinterpret_cast<uint64_t>(region(r)) : specs[r].iova) + off;
}

void build_device()
{
    Config cfg;
    cfg.stag_key_seed = stag_key_seed;
    cfg.log_level = LogLevel::error;
    dev = new Device;
    dev->emu = std::make_unique<Emulator>(cfg);
    Emulator& e = *dev->emu;
    if (e.alloc_pd(&dev->pd) || e.alloc_pd(&dev->other_pd) || e.create_cq(256, &dev->scq) ||
        e.create_cq(256, &dev->rcq))
        fail("device set-up failed");
    for (int r = 0; r < region_count; ++r) {
        uint8_t* p = region(r);
        const uint64_t iova = specs[r].use_address ? reinterpret_cast<uint64_t>(p) : specs[r].iova;
        if (e.reg_mr(specs[r].other_pd ? dev->other_pd : dev->pd, p, region_size, iova, specs[r].access, &dev->mr[r]))
            fail("reg_mr %s failed", specs[r].name);
        if (dev->mr[r]->stag() != expected_stags[r])
            fail("STag of %s is 0x%x, the corpus expects 0x%x: update expected_stags here and in make_corpus.py",
                 specs[r].name, dev->mr[r]->stag(), expected_stags[r]);
    }
}

// The index comes back (last freed, first reused) and keys follow a fixed
// sequence: registering again until the key comes round takes a few hundred
// cheap tries, far less than a new device (engine thread, identity).
bool reregister(int r)
{
    Emulator& e = *dev->emu;
    for (int attempt = 0; attempt < 4096; ++attempt) {
        uint8_t* p = region(r);
        const uint64_t iova = specs[r].use_address ? reinterpret_cast<uint64_t>(p) : specs[r].iova;
        if (e.dereg_mr(dev->mr[r]) ||
            e.reg_mr(specs[r].other_pd ? dev->other_pd : dev->pd, p, region_size, iova, specs[r].access, &dev->mr[r]))
            fail("re-registering %s failed", specs[r].name);
        if (dev->mr[r]->stag() == expected_stags[r]) return true;
    }
    return false;
}

void destroy_device()
{
    delete dev;  // the emulator frees its objects and joins the engine
    dev = nullptr;
}

void set_up_once()
{
    void* p = ::mmap(reinterpret_cast<void*>(arena_address), arena_size, PROT_READ | PROT_WRITE,
                     MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED_NOREPLACE, -1, 0);
    if (p == MAP_FAILED || p != reinterpret_cast<void*>(arena_address)) fail("cannot map the arena at its address");
    arena = static_cast<uint8_t*>(p);
    ::mprotect(arena, page, PROT_NONE);
    ::mprotect(arena + arena_size - page, page, PROT_NONE);
    reference.resize(arena_size);
    for (size_t i = page; i < arena_size - page; ++i) reference[i] = static_cast<uint8_t>(i * 131 + (i >> 9) + 7);
    std::memcpy(arena + page, reference.data() + page, arena_size - 2 * page);

    listener = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (::bind(listener, reinterpret_cast<sockaddr*>(&a), sizeof a) || ::listen(listener, 16))
        fail("loopback listen failed");
    socklen_t len = sizeof a;
    ::getsockname(listener, reinterpret_cast<sockaddr*>(&a), &len);
    listen_port = ntohs(a.sin_port);
    build_device();
}

// One fresh loopback TCP connection: *peer (our end), *qp_end (the QP's).
void tcp_pair(int* peer, int* qp_end)
{
    *peer = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    a.sin_port = htons(listen_port);
    if (::connect(*peer, reinterpret_cast<sockaddr*>(&a), sizeof a)) fail("connect: %s", std::strerror(errno));
    *qp_end = ::accept4(listener, nullptr, nullptr, SOCK_CLOEXEC);
    if (*qp_end < 0) fail("accept: %s", std::strerror(errno));
    ::fcntl(*peer, F_SETFL, ::fcntl(*peer, F_GETFL) | O_NONBLOCK);
}

// Feed the stream, half-close, and read whatever the QP sends until it closes.
// This thread also drives the QP's receive and send paths (as a polling
// application does through poll_cq), taking turns with the engine thread:
// waiting for the engine to be scheduled would cost milliseconds per input
// on a loaded machine.
void run_peer(QueuePair* qp, int peer, const uint8_t* data, size_t size)
{
    using clock = std::chrono::steady_clock;
    const auto deadline = clock::now() + std::chrono::seconds(10);
    static uint8_t sink[64 * 1024];
    size_t sent = 0;
    bool write_open = true;
    for (;;) {
        if (write_open && sent == size) {
            ::shutdown(peer, SHUT_WR);
            write_open = false;
        }
        if (write_open) {
            const ssize_t n = ::send(peer, data + sent, size - sent, MSG_NOSIGNAL | MSG_DONTWAIT);
            if (n > 0) sent += static_cast<size_t>(n);
            else if (n < 0 && errno != EAGAIN && errno != EINTR) write_open = false;  // the QP closed (RST)
        }
        qp->rx_progress();
        qp->try_tx_progress();
        const ssize_t n = ::read(peer, sink, sizeof sink);
        if (n == 0 || (n < 0 && errno != EAGAIN && errno != EINTR)) return;  // the QP closed its socket
        if (n > 0) continue;
        if (clock::now() > deadline) fail("the QP neither consumed the input nor closed within 10 s (hang)");
        pollfd pfd{peer, static_cast<short>(POLLIN | (write_open ? POLLOUT : 0)), 0};
        ::poll(&pfd, 1, 1);
    }
}

// Ranges a peer may change in this run: remote-writable regions, posted
// receive SGEs, the Read's sink.
struct Writable {
    std::vector<Range> ranges;  // arena offsets
    bool contains(size_t off) const
    {
        for (const Range& r : ranges)
            if (off >= r.off && off < r.off + r.len) return true;
        return false;
    }
};

void check_and_restore_memory(const Writable& w)
{
    if (std::memcmp(arena + page, reference.data() + page, arena_size - 2 * page) != 0) {
        for (size_t i = page; i < arena_size - page; ++i) {
            if (arena[i] == reference[i] || w.contains(i)) continue;
            const char* where = "canary band";
            for (int r = 0; r < region_count; ++r)
                if (i >= region_offset(r) && i < region_offset(r) + region_size) where = specs[r].name;
            fail("octet at arena offset %zu (%s) changed: 0x%02x, was 0x%02x", i, where, arena[i], reference[i]);
        }
        std::memcpy(arena + page, reference.data() + page, arena_size - 2 * page);
    }
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***)
{
    set_up_once();
    return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size)
{
    if (size < 2) return 0;
    const uint8_t sel = data[0], sel1 = data[1];
    const bool crc = sel & 1, markers = sel & 2, use_srq = sel & 4, responder = sel & 8;
    const auto rtr = static_cast<RtrType>(responder ? (sel >> 4) & 3 : 0);
    const bool post_read = sel & 0x40, multi_sge = sel & 0x80;
    const uint16_t ird = static_cast<uint16_t>(1 + (sel1 & 7));
    const uint32_t receives = (sel1 >> 3) & 7;
    const bool bad_lkey_access = sel1 & 0x40, bad_lkey_pd = sel1 & 0x80;

    Emulator& e = *dev->emu;
    Writable writable;
    writable.ranges.push_back({region_offset(W), region_size});
    writable.ranges.push_back({region_offset(Z), region_size});

    SharedReceiveQueue* srq = nullptr;
    if (use_srq && e.create_srq(dev->pd, SrqAttr{8, 4, 0}, &srq)) fail("create_srq failed");
    QpInitAttr ia;
    ia.send_cq = dev->scq;
    ia.recv_cq = dev->rcq;
    ia.srq = srq;
    ia.cap = {8, 8, 4, 4, 0};
    QueuePair* qp = nullptr;
    if (e.create_qp(dev->pd, ia, &qp)) fail("create_qp failed");
    QpAttr attr;
    attr.qp_state = QpState::init;
    // REMOTE_ATOMIC too: an RFC 7306 Atomic Request to W is performed (W is remote-writable).
    attr.qp_access_flags = access_local_write | access_remote_write | access_remote_read | access_remote_atomic;
    if (qp->modify(attr, qp_attr_state | qp_attr_access_flags)) fail("modify to INIT failed");

    // Receive WQEs.
    const std::span<const Range> layout = multi_sge ? std::span<const Range>(sge_multi) : sge_single;
    uint32_t wqe_capacity = 0;
    for (const Range& r : layout) wqe_capacity += static_cast<uint32_t>(r.len);
    for (uint32_t i = 0; i < receives; ++i) {
        Sge sge[3];
        for (size_t s = 0; s < layout.size(); ++s) {
            sge[s] = {tagged_offset(RECV, i * wqe_stride + layout[s].off), static_cast<uint32_t>(layout[s].len),
                      dev->mr[RECV]->lkey()};
            writable.ranges.push_back({region_offset(RECV) + i * wqe_stride + layout[s].off, layout[s].len});
        }
        if (i == 0 && (bad_lkey_access || bad_lkey_pd)) {
            // R has no local write, P is of another PD: the WQE fails its
            // check before anything is placed, in any of its SGEs.
            const int bad_region = bad_lkey_pd ? P : R;
            sge[0] = {tagged_offset(bad_region, 0), sge[0].length, dev->mr[bad_region]->lkey()};
            writable.ranges.resize(writable.ranges.size() - layout.size());
        }
        const RecvWr wr{i, sge, static_cast<uint32_t>(layout.size())};
        size_t bad;
        const int rc = srq ? srq->post_recv(&wr, 1, &bad) : qp->post_recv(&wr, 1, &bad);
        if (rc) fail("post_recv failed: %d", rc);
    }

    int peer, qp_end;
    tcp_pair(&peer, &qp_end);
    ConnectionParams cp;
    cp.fd = qp_end;
    cp.role = responder ? ConnectionRole::responder : ConnectionRole::initiator;
    cp.tx = cp.rx = {crc, markers};
    cp.rtr = rtr;
    cp.ird = ird;
    cp.ord = 4;
    if (int rc = qp->attach_connection(cp)) fail("attach_connection failed: %d", rc);

    if (post_read) {
        Sge sge{tagged_offset(SINK, sink_offset), sink_length, dev->mr[SINK]->lkey()};
        SendWr wr;
        wr.wr_id = read_wr_id;
        wr.opcode = WrOpcode::rdma_read;
        wr.send_flags = send_signaled;
        wr.sg_list = &sge;
        wr.num_sge = 1;
        wr.remote_addr = 0x10000;
        wr.rkey = 0x1234;
        size_t bad;
        if (int rc = qp->post_send(&wr, 1, &bad)) fail("post_send(Read) failed: %d", rc);
        writable.ranges.push_back({region_offset(SINK) + sink_offset, sink_length});
    }

    const auto t0 = std::chrono::steady_clock::now();
    run_peer(qp, peer, data + 2, size - 2);
    const auto peer_us =
        std::chrono::duration_cast<std::chrono::microseconds>(std::chrono::steady_clock::now() - t0).count();
    const TerminateRecord term = qp->last_terminate_sent();
    const uint64_t rx_fpdus = qp->counters().rx_fpdus.load();
    if (qp->state() != QpState::err) fail("QP closed its socket but is in state %u, not ERROR",
                                          static_cast<unsigned>(qp->state()));
    if (e.destroy_qp(qp)) fail("destroy_qp failed");
    if (srq && e.destroy_srq(srq)) fail("destroy_srq failed");
    linger lg{1, 0};
    ::setsockopt(peer, SOL_SOCKET, SO_LINGER, &lg, sizeof lg);  // RST: no TIME_WAIT pile-up
    ::close(peer);

    // Completions.
    std::array<int, max_recv> seen{};
    int read_done = 0;
    uint32_t recv_done = 0;
    Completion wc[32];
    static const bool trace = std::getenv("FUZZ_QP_TRACE") != nullptr;  // what an input reached (corpus work)
    if (trace)
        std::fprintf(stderr, "trace: %lld us on the wire, %llu FPDUs delivered, Terminate sent: %s %u/%u/0x%02x\n",
                     static_cast<long long>(peer_us), static_cast<unsigned long long>(rx_fpdus), term.valid ? "yes" : "no",
                     static_cast<unsigned>(term.code.layer), term.code.etype, term.code.error_code);
    for (int n; (n = dev->rcq->poll(wc, 32)) > 0;) {
        for (int i = 0; i < n; ++i) {
            if (trace)
                std::fprintf(stderr, "trace: recv wr %llu status %u len %u\n",
                             static_cast<unsigned long long>(wc[i].wr_id), static_cast<unsigned>(wc[i].status),
                             wc[i].byte_len);
            if (wc[i].wr_id >= receives || seen[wc[i].wr_id]++) fail("receive completion for wr_id %llu: unknown or twice",
                                                                     static_cast<unsigned long long>(wc[i].wr_id));
            if (wc[i].status == WcStatus::success && wc[i].byte_len > wqe_capacity)
                fail("receive completion says %u octets, the WQE holds fewer", wc[i].byte_len);
            ++recv_done;
        }
    }
    for (int n; (n = dev->scq->poll(wc, 32)) > 0;)
        for (int i = 0; i < n; ++i) {
            if (trace) std::fprintf(stderr, "trace: Read status %u\n", static_cast<unsigned>(wc[i].status));
            if (wc[i].wr_id != read_wr_id || ++read_done > 1) fail("unexpected send completion");
        }
    if (!srq && recv_done != receives) fail("%u of %u receive WQEs completed", recv_done, receives);
    if (post_read && read_done != 1) fail("the Read did not complete");

    check_and_restore_memory(writable);

    // Send with Invalidate may have invalidated a region: register it again
    // under the STag the corpus names, or start over with a new device.
    for (int r = 0; r < region_count; ++r) {
        if (!dev->mr[r]->valid() && !reregister(r)) {
            destroy_device();
            build_device();
            break;
        }
    }
    return 0;
}
