#include "emulator/capture/stream_capture.h"

#include <fcntl.h>
#include <pthread.h>
#include <netinet/in.h>
#include <sys/uio.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <mutex>
#include <unordered_map>
#include <vector>

#include "emulator/faults/fault_injector.h"
#include "emulator/base/log.h"
#include "emulator/wire/capture_framing.h"
#include "emulator/wire/pcapng.h"
#include "emulator/wire/tcp_frame.h"

namespace iwemu::capture {

bool g_on = false;

namespace {
bool g_capturing = false;  // a capture file is open (g_on: capture or faults)
}  // namespace

namespace {

using wire::tcpframe::Endpoint;

// One direction of a flow.
struct Direction {
    uint32_t isn = 0;
    uint32_t next = 0;              // sequence number of the next octet to write out
    std::vector<uint8_t> pending;   // octets of a unit not complete yet (at most one unit)
    wire::CaptureFraming framing;
    std::vector<uint8_t> startup;   // its MPA startup frame, written again after a rotation
    bool fin = false;
};

struct Flow {
    Endpoint local, remote;
    bool active = true;
    bool mirror = false;    // the other end of a flow this process already records
    int mirror_of = -1;     // fd of that flow
    uint32_t qpn = 0;
    std::string comment;    // for the next packet written
    Direction out, in;
};

uint64_t now_us()
{
    return static_cast<uint64_t>(std::chrono::duration_cast<std::chrono::microseconds>(
                                     std::chrono::system_clock::now().time_since_epoch())
                                     .count());
}

bool endpoint_of(const sockaddr_storage& ss, Endpoint& e)
{
    e = {};
    if (ss.ss_family == AF_INET) {
        const auto& a = reinterpret_cast<const sockaddr_in&>(ss);
        std::memcpy(e.addr.data(), &a.sin_addr, 4);
        e.port = ntohs(a.sin_port);
        return true;
    }
    if (ss.ss_family == AF_INET6) {
        const auto& a = reinterpret_cast<const sockaddr_in6&>(ss);
        if (IN6_IS_ADDR_V4MAPPED(&a.sin6_addr)) {
            std::memcpy(e.addr.data(), a.sin6_addr.s6_addr + 12, 4);
        } else {
            e.v6 = true;
            std::memcpy(e.addr.data(), a.sin6_addr.s6_addr, 16);
        }
        e.port = ntohs(a.sin6_port);
        return true;
    }
    return false;
}

// Sequence numbers depend on the endpoints only (FNV-1a), so the captures
// two processes make of one connection agree and merge (mergecap).
uint32_t synthetic_isn(const Endpoint& src, const Endpoint& dst)
{
    uint32_t h = 2166136261u;
    auto mix = [&h](const uint8_t* p, size_t n) {
        for (size_t i = 0; i < n; ++i) h = (h ^ p[i]) * 16777619u;
    };
    mix(src.addr.data(), 16);
    mix(dst.addr.data(), 16);
    const uint8_t ports[4] = {uint8_t(src.port >> 8), uint8_t(src.port), uint8_t(dst.port >> 8), uint8_t(dst.port)};
    mix(ports, 4);
    return h;
}

class Sink {
public:
    bool open(const Settings& s);
    void begin(int fd, bool active);
    void data(int fd, bool outbound, const iovec* iov, size_t iovcnt, size_t n, uint32_t qpn);
    void peer_closed(int fd, bool reset);
    void shutdown_wr(int fd);
    void closing(int fd, bool abortive);
    void local_end_locked(int fd, bool rst);
    std::mutex& lock() { return mu_; }

private:
    Flow* flow_locked(int fd, bool create);
    void emit(Flow& f, bool outbound, std::span<const uint8_t> payload, uint8_t flags, size_t keep, uint64_t ts);
    void write_units(Flow& f, bool outbound, uint64_t ts, bool flush_partial);
    void handshake(Flow& f, uint64_t ts);
    void note_qpn(int fd, Flow& f, uint32_t qpn);
    void end_flow(Flow& f, uint8_t flag, bool outbound, uint64_t ts);
    bool open_file();
    void rotate_if_due();
    void write_out();

    std::mutex mu_;
    Settings s_;
    std::string path_;
    int file_ = -1;
    uint64_t file_bytes_ = 0;
    bool failed_ = false;
    std::vector<uint8_t> buf_;
    std::vector<uint8_t> frame_;
    std::unordered_map<int, std::unique_ptr<Flow>> flows_;
};

Sink* g_sink = nullptr;  // never freed: I/O may race process exit

Sink& sink()
{
    return *g_sink;
}

std::string numbered(const std::string& path, uint32_t n)
{
    if (n == 0) return path;
    const size_t dot = path.rfind('.');
    const size_t slash = path.rfind('/');
    if (dot != std::string::npos && dot > 0 && (slash == std::string::npos || dot > slash + 1))
        return path.substr(0, dot) + "." + std::to_string(n) + path.substr(dot);
    return path + "." + std::to_string(n);
}

bool Sink::open_file()
{
    file_ = ::open(path_.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (file_ < 0) return false;
    file_bytes_ = 0;
    std::vector<uint8_t> hdr;
    wire::pcapng::append_section_header(hdr, "iwemu");
    wire::pcapng::append_interface(hdr, wire::pcapng::linktype_ethernet, s_.snaplen, "iwemu");
    buf_.insert(buf_.begin(), hdr.begin(), hdr.end());
    return true;
}

bool Sink::open(const Settings& s)
{
    std::lock_guard<std::mutex> g(mu_);
    s_ = s;
    path_ = expand_path(s.path, static_cast<long>(::getpid()));
    if (!open_file()) {
        std::fprintf(stderr, "iwemu: capture: cannot create %s: %s\n", path_.c_str(), std::strerror(errno));
        return false;
    }
    write_out();
    IWEMU_LOG(info, "capture: writing %s (snap length %u)", path_.c_str(), s_.snaplen);
    return true;
}

// The file has reached its size: it becomes PATH.1 (PATH.1 becomes PATH.2
// ...; the oldest beyond `files` goes) and a new PATH starts with each open
// flow's handshake and startup frames again, so it decodes on its own.
void Sink::rotate_if_due()
{
    if (s_.max_file_bytes == 0 || file_bytes_ < s_.max_file_bytes || file_ < 0) return;
    ::close(file_);
    file_ = -1;
    const uint32_t keep = std::max<uint32_t>(s_.files, 1);
    ::unlink(numbered(path_, keep - 1).c_str());
    for (uint32_t i = keep - 1; i > 0; --i) ::rename(numbered(path_, i - 1).c_str(), numbered(path_, i).c_str());
    if (keep == 1) ::unlink(path_.c_str());
    if (!open_file()) {
        if (!failed_) std::fprintf(stderr, "iwemu: capture: cannot create %s: %s\n", path_.c_str(), std::strerror(errno));
        failed_ = true;
        return;
    }
    const uint64_t ts = now_us();
    for (auto& [fd, f] : flows_) {
        if (f->mirror) continue;
        handshake(*f, ts);
        for (bool outbound : {true, false}) {
            Direction& d = outbound ? f->out : f->in;
            if (d.startup.empty()) continue;
            const uint32_t next = d.next;
            d.next = d.isn + 1;
            emit(*f, outbound, d.startup, wire::tcpframe::ack | wire::tcpframe::psh, d.startup.size(), ts);
            d.next = next;
        }
    }
}

void Sink::write_out()
{
    size_t off = 0;
    while (file_ >= 0 && off < buf_.size()) {
        const ssize_t n = ::write(file_, buf_.data() + off, buf_.size() - off);
        if (n < 0 && errno == EINTR) continue;
        if (n <= 0) {
            if (!failed_) std::fprintf(stderr, "iwemu: capture: write to %s failed: %s\n", path_.c_str(), std::strerror(errno));
            failed_ = true;
            break;
        }
        off += static_cast<size_t>(n);
    }
    file_bytes_ += off;
    buf_.clear();
    if (buf_.capacity() > (1u << 20)) buf_.shrink_to_fit();
}

void Sink::emit(Flow& f, bool outbound, std::span<const uint8_t> payload, uint8_t flags, size_t keep, uint64_t ts)
{
    if (f.mirror) return;
    Direction& d = outbound ? f.out : f.in;
    const Direction& o = outbound ? f.in : f.out;
    wire::tcpframe::Segment seg;
    seg.src = outbound ? f.local : f.remote;
    seg.dst = outbound ? f.remote : f.local;
    seg.seq = d.next;
    seg.ack = o.next + (o.fin ? 1 : 0);
    seg.flags = flags;
    if (flags & wire::tcpframe::syn) seg.seq = d.isn;
    frame_.resize(wire::tcpframe::max_headers + payload.size());
    const size_t hdr = wire::tcpframe::build_headers(seg, payload, frame_.data());
    if (!payload.empty()) std::memcpy(frame_.data() + hdr, payload.data(), payload.size());  // SYN, FIN: none
    const size_t total = hdr + payload.size();
    const size_t captured = std::min<size_t>({total, hdr + keep, s_.snaplen});
    wire::pcapng::append_enhanced_packet(buf_, 0, ts, {frame_.data(), captured}, static_cast<uint32_t>(total), f.comment);
    f.comment.clear();
    if (!(flags & wire::tcpframe::syn)) d.next += static_cast<uint32_t>(payload.size());
}

void Sink::handshake(Flow& f, uint64_t ts)
{
    using namespace wire::tcpframe;
    // The active side's SYN, the passive side's SYN-ACK, the active side's ACK.
    const bool a = f.active;
    f.out.next = f.out.isn + 1;
    f.in.next = f.in.isn + 1;
    const uint32_t out_next = f.out.next, in_next = f.in.next;
    f.in.next = in_next - 1;  // no ACK of a SYN not seen yet (the ack field is 0 without the flag)
    emit(f, a, {}, syn, 0, ts);
    f.in.next = in_next;
    f.out.next = out_next;
    emit(f, !a, {}, syn | ack, 0, ts);
    emit(f, a, {}, ack, 0, ts);
}

Flow* Sink::flow_locked(int fd, bool create)
{
    auto it = flows_.find(fd);
    if (it != flows_.end()) return it->second.get();
    if (!create) return nullptr;
    begin(fd, true);  // a connection not set up by the CM: assume we connected
    it = flows_.find(fd);
    return it == flows_.end() ? nullptr : it->second.get();
}

void Sink::begin(int fd, bool active)
{
    sockaddr_storage l{}, r{};
    socklen_t ll = sizeof l, rl = sizeof r;
    auto f = std::make_unique<Flow>();
    if (::getsockname(fd, reinterpret_cast<sockaddr*>(&l), &ll) != 0 || ::getpeername(fd, reinterpret_cast<sockaddr*>(&r), &rl) != 0 ||
        !endpoint_of(l, f->local) || !endpoint_of(r, f->remote))
        return;
    if (f->local.v6 != f->remote.v6) return;
    flows_.erase(fd);  // its connection is gone: the descriptor was reused
    f->active = active;
    f->out.isn = synthetic_isn(f->local, f->remote);
    f->in.isn = synthetic_isn(f->remote, f->local);
    for (auto& [ofd, o] : flows_) {
        if (!o->mirror && o->local == f->remote && o->remote == f->local) {
            f->mirror = true;  // both ends in this process: the first one records
            f->mirror_of = ofd;
        }
    }
    handshake(*f, now_us());
    flows_[fd] = std::move(f);
}

void Sink::note_qpn(int fd, Flow& f, uint32_t qpn)
{
    (void)fd;
    if (qpn == 0 || f.qpn == qpn) return;
    f.qpn = qpn;
    Flow* target = &f;
    if (f.mirror) {
        auto it = flows_.find(f.mirror_of);
        if (it == flows_.end()) return;
        target = it->second.get();
    }
    if (!target->comment.empty()) target->comment += "; ";
    target->comment += "iwemu qp=" + std::to_string(qpn);
}

// Writes out the complete units of a direction's pending octets as segments
// cut at unit boundaries (several units to a segment, up to its maximum;
// one FPDU per segment when payload is elided), and with flush_partial the
// incomplete rest too.
void Sink::write_units(Flow& f, bool outbound, uint64_t ts, bool flush_partial)
{
    Direction& d = outbound ? f.out : f.in;
    const std::span<const uint8_t> all(d.pending);
    const bool elide = s_.payload_keep != UINT32_MAX;
    constexpr uint8_t flags = wire::tcpframe::ack | wire::tcpframe::psh;
    size_t pos = 0, seg_start = 0;
    auto flush_segment = [&](size_t end) {
        if (end > seg_start) emit(f, outbound, all.subspan(seg_start, end - seg_start), flags, end - seg_start, ts);
        seg_start = end;
    };
    while (pos < all.size()) {
        const bool startup = d.framing.in_startup();
        const size_t len = d.framing.unit_length(all.subspan(pos));
        if (len == 0 || len > all.size() - pos) break;
        const std::span<const uint8_t> unit = all.subspan(pos, len);
        d.framing.unit_taken(unit);
        if (startup && !d.framing.passing_through()) {
            d.startup.assign(unit.begin(), unit.end());
            // M bit in either direction's startup frame: markers (RFC 5044 §7.1.1).
            if (d.framing.marker_flag()) {
                f.out.framing.pass_through();
                f.in.framing.pass_through();
            }
        }
        const bool fpdu = !startup && !d.framing.passing_through();
        if (elide && fpdu) {
            flush_segment(pos);
            // One FPDU to a segment, kept as far as its headers and
            // payload_keep octets (the rest counted, not captured).
            for (size_t off = 0; off < len; off += wire::tcpframe::max_segment_payload) {
                const size_t piece = std::min(len - off, wire::tcpframe::max_segment_payload);
                const size_t head = off == 0 ? wire::fpdu_header_length(unit) : 0;
                const size_t keep = head >= len ? piece
                                                : (off == 0 ? std::min<size_t>(piece, head + s_.payload_keep) : 0);
                emit(f, outbound, unit.subspan(off, piece), flags, keep, ts);
            }
            seg_start = pos + len;
        } else if (len > wire::tcpframe::max_segment_payload) {
            flush_segment(pos);
            for (size_t off = 0; off < len; off += wire::tcpframe::max_segment_payload) {
                const size_t piece = std::min(len - off, wire::tcpframe::max_segment_payload);
                emit(f, outbound, unit.subspan(off, piece), flags, piece, ts);
            }
            seg_start = pos + len;
        } else if (pos + len - seg_start > wire::tcpframe::max_segment_payload) {
            flush_segment(pos);
        }
        pos += len;
    }
    flush_segment(pos);
    if (flush_partial && pos < all.size()) {
        seg_start = pos;
        for (size_t off = pos; off < all.size(); off += wire::tcpframe::max_segment_payload) {
            seg_start = off;
            flush_segment(std::min(all.size(), off + wire::tcpframe::max_segment_payload));
        }
        pos = all.size();
    }
    d.pending.erase(d.pending.begin(), d.pending.begin() + static_cast<std::ptrdiff_t>(pos));
}

void Sink::data(int fd, bool outbound, const iovec* iov, size_t iovcnt, size_t n, uint32_t qpn)
{
    rotate_if_due();
    Flow* f = flow_locked(fd, true);
    if (!f) return;
    note_qpn(fd, *f, qpn);
    Direction& d = outbound ? f->out : f->in;
    for (size_t i = 0; i < iovcnt && n > 0; ++i) {
        const size_t take = std::min(n, iov[i].iov_len);
        const auto* p = static_cast<const uint8_t*>(iov[i].iov_base);
        d.pending.insert(d.pending.end(), p, p + take);
        n -= take;
    }
    if (!f->mirror) write_units(*f, outbound, now_us(), false);
    else d.pending.clear();
    write_out();
}

void Sink::end_flow(Flow& f, uint8_t flag, bool outbound, uint64_t ts)
{
    Direction& d = outbound ? f.out : f.in;
    if (d.fin) return;
    write_units(f, outbound, ts, true);
    emit(f, outbound, {}, flag | wire::tcpframe::ack, 0, ts);
    d.fin = true;
}

void Sink::peer_closed(int fd, bool reset)
{
    Flow* f = flow_locked(fd, false);
    if (!f) return;
    end_flow(*f, reset ? wire::tcpframe::rst : wire::tcpframe::fin, false, now_us());
    write_out();
}

void Sink::shutdown_wr(int fd)
{
    std::lock_guard<std::mutex> g(mu_);
    Flow* f = flow_locked(fd, false);
    if (!f) return;
    end_flow(*f, wire::tcpframe::fin, true, now_us());
    write_out();
}

// Our FIN or RST, put on the wire by a fault rule (the lock is held).
void Sink::local_end_locked(int fd, bool rst)
{
    Flow* f = flow_locked(fd, false);
    if (!f || f->out.fin) return;
    const uint64_t ts = now_us();
    write_units(*f, true, ts, true);
    emit(*f, true, {}, (rst ? wire::tcpframe::rst : wire::tcpframe::fin) | wire::tcpframe::ack, 0, ts);
    f->out.fin = true;
    write_out();
}

void Sink::closing(int fd, bool abortive)
{
    std::lock_guard<std::mutex> g(mu_);
    Flow* f = flow_locked(fd, false);
    if (!f) return;
    const uint64_t ts = now_us();
    if (abortive && !f->out.fin) {
        write_units(*f, true, ts, true);
        emit(*f, true, {}, wire::tcpframe::rst | wire::tcpframe::ack, 0, ts);
    } else {
        end_flow(*f, wire::tcpframe::fin, true, ts);
    }
    write_units(*f, false, ts, true);
    flows_.erase(fd);
    write_out();
}

// Keeps errno as the system call left it across the recording.
struct ErrnoKeeper {
    int saved;
    ErrnoKeeper() : saved(errno) {}
    ~ErrnoKeeper() { errno = saved; }
};

}  // namespace

std::string check_path(std::string_view path)
{
    for (size_t i = 0; i < path.size(); ++i) {
        if (path[i] != '%') continue;
        if (i + 1 < path.size() && (path[i + 1] == 'p' || path[i + 1] == '%')) {
            ++i;
            continue;
        }
        return "'%" + std::string(i + 1 < path.size() ? path.substr(i + 1, 1) : "") + "' at position " +
               std::to_string(i + 1) + " (only %p and %% are known)";
    }
    return {};
}

std::string expand_path(std::string_view path, long pid)
{
    std::string out;
    for (size_t i = 0; i < path.size(); ++i) {
        if (path[i] == '%' && i + 1 < path.size()) {
            if (path[i + 1] == 'p') {
                out += std::to_string(pid);
                ++i;
                continue;
            }
            if (path[i + 1] == '%') {
                out += '%';
                ++i;
                continue;
            }
        }
        out += path[i];
    }
    return out;
}

bool start(const Settings& settings)
{
    if (settings.path.empty()) return false;
    if (g_capturing) return true;  // one capture per process (test fixtures make several emulators)
    g_sink = new Sink;
    if (!sink().open(settings)) return false;
    g_capturing = true;
    g_on = true;
    // A forked child must not write into its parent's file: with %p it
    // starts a file of its own (a new sink: another thread may have held the
    // old one's lock at the fork), else it captures nothing.
    static Settings saved = settings;
    pthread_atfork(nullptr, nullptr, [] {
        g_capturing = false;
        if (saved.path.find("%p") == std::string::npos) return;
        g_sink = new Sink;
        g_capturing = sink().open(saved);
    });
    return true;
}

void hooks_on() { g_on = true; }

void begin(int fd, bool active)
{
    if (faults::active()) faults::begin(fd);
    if (!g_capturing) return;
    std::lock_guard<std::mutex> g(sink().lock());
    sink().begin(fd, active);
}

ssize_t sendmsg(int fd, const msghdr* msg, int flags, uint32_t qpn)
{
    std::unique_lock<std::mutex> g;
    if (g_capturing) g = std::unique_lock<std::mutex>(sink().lock());
    const iovec* sent = msg->msg_iov;
    size_t count = msg->msg_iovlen;
    faults::Injected injected;
    const ssize_t n = faults::active() ? faults::sendmsg(fd, msg, flags, qpn, &sent, &count, &injected)
                                       : ::sendmsg(fd, msg, flags);
    ErrnoKeeper keep;
    if (!g_capturing) return n;
    const size_t recorded = n > 0 ? injected.sent_octets.value_or(static_cast<size_t>(n)) : 0;
    if (recorded > 0) sink().data(fd, true, sent, count, recorded, qpn);
    if (!injected.octets.empty()) {
        const iovec v{const_cast<uint8_t*>(injected.octets.data()), injected.octets.size()};
        sink().data(fd, true, &v, 1, v.iov_len, qpn);
    }
    if (injected.fin || injected.rst) sink().local_end_locked(fd, injected.rst);
    return n;
}

ssize_t send(int fd, const void* buf, size_t len, int flags)
{
    iovec v{const_cast<void*>(buf), len};
    msghdr msg{};
    msg.msg_iov = &v;
    msg.msg_iovlen = 1;
    return sendmsg(fd, &msg, flags, 0);
}

ssize_t recvmsg(int fd, msghdr* msg, int flags, uint32_t qpn)
{
    std::unique_lock<std::mutex> g;
    if (g_capturing) g = std::unique_lock<std::mutex>(sink().lock());
    const ssize_t n = faults::active() ? faults::recvmsg(fd, msg, flags, qpn) : ::recvmsg(fd, msg, flags);
    ErrnoKeeper keep;
    if (!g_capturing || (flags & MSG_PEEK)) return n;
    if (n > 0) sink().data(fd, false, msg->msg_iov, msg->msg_iovlen, static_cast<size_t>(n), qpn);
    else if (n == 0) sink().peer_closed(fd, false);
    else if (keep.saved == ECONNRESET) sink().peer_closed(fd, true);
    return n;
}

ssize_t recv(int fd, void* buf, size_t len, int flags, uint32_t qpn)
{
    iovec v{buf, len};
    msghdr msg{};
    msg.msg_iov = &v;
    msg.msg_iovlen = 1;
    return recvmsg(fd, &msg, flags, qpn);
}

void shutdown_wr(int fd)
{
    if (g_capturing) sink().shutdown_wr(fd);
}

void closing(int fd, bool abortive)
{
    if (faults::active()) faults::forget(fd);
    if (g_capturing) sink().closing(fd, abortive);
}

}  // namespace iwemu::capture
