#include "emulator/faults/fault_injector.h"

#include <netinet/in.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <mutex>
#include <random>
#include <unordered_map>
#include <variant>
#include <vector>

#include "emulator/faults/fault_rules.h"
#include "emulator/base/log.h"
#include "emulator/status_publisher.h"
#include "emulator/wire/capture_framing.h"
#include "emulator/wire/crc32c.h"
#include "emulator/wire/fpdu.h"
#include "emulator/wire/terminate_message.h"

namespace iwemu::faults {

namespace {

using Clock = std::chrono::steady_clock;

// Unit boundaries of one direction, followed octet by octet as they are
// presented (a unit's header may arrive in pieces).
struct Track {
    uint64_t parsed = 0;      // stream offset parsed up to
    uint64_t unit_end = 0;    // stream offset where the current unit ends
    uint64_t unit_start = 0;
    uint8_t hdr[20] = {};
    size_t hdr_len = 0;
    wire::CaptureFraming framing;
    uint64_t fpdus = 0;       // FPDUs seen (startup frames not counted)
};

struct RuleState {
    uint64_t matched = 0;
    uint64_t fired = 0;
};

enum class Cut : uint8_t { none, drop_rst, drop_fin, terminate };

struct Flow {
    uint16_t lport = 0, rport = 0;
    uint32_t qpn = 0;
    Clock::time_point begin;
    uint64_t tx_sent = 0;
    Track tx, rx;
    bool crc = false, markers = false;
    std::vector<std::pair<uint64_t, uint8_t>> flips;  // tx stream offsets of octets to alter, and the XOR mask
    std::vector<std::pair<uint64_t, uint64_t>> skips;  // tx stream ranges that never leave, in order
    Cut cut = Cut::none;
    uint64_t cut_at = 0;
    wire::TerminateCode cut_code{};
    bool dropped = false;
    Clock::time_point hold_until{};  // delay / stall: nothing read before then
    std::vector<RuleState> rs;
    std::mt19937_64 rng;
};

struct State {
    std::mutex mu;
    RuleSet set;
    uint64_t seed = 0;
    uint64_t flows_begun = 0;
    std::unordered_map<int, std::unique_ptr<Flow>> flows;
    std::vector<uint8_t> scratch;
    iovec scratch_iov{};
    bool holds = false;    // a delay, stall or late_read rule: receives are cut at FPDU headers
    bool rejects = false;  // a reject rule
    std::vector<RuleState> reject_rs;  // per process: the Nth connection request
    std::unique_ptr<std::atomic<uint64_t>[]> fired;  // per rule, read by fired_count()
};

State* g_state = nullptr;

uint16_t port_of(const sockaddr_storage& ss)
{
    if (ss.ss_family == AF_INET) return ntohs(reinterpret_cast<const sockaddr_in&>(ss).sin_port);
    if (ss.ss_family == AF_INET6) return ntohs(reinterpret_cast<const sockaddr_in6&>(ss).sin6_port);
    return 0;
}

Flow& flow_locked(int fd, uint32_t qpn)
{
    auto& slot = g_state->flows[fd];
    if (!slot) {
        slot = std::make_unique<Flow>();
        sockaddr_storage l{}, r{};
        socklen_t ll = sizeof l, rl = sizeof r;
        if (::getsockname(fd, reinterpret_cast<sockaddr*>(&l), &ll) == 0) slot->lport = port_of(l);
        if (::getpeername(fd, reinterpret_cast<sockaddr*>(&r), &rl) == 0) slot->rport = port_of(r);
        slot->begin = Clock::now();
        slot->rs.resize(g_state->set.rules.size());
        // Each connection draws from its own sequence: the same seed gives
        // the same decisions whatever the other connections do.
        slot->rng.seed(g_state->seed ^ (0x9E3779B97F4A7C15ull * ++g_state->flows_begun));
    }
    if (qpn != 0) slot->qpn = qpn;
    return *slot;
}

// Evaluates the rules for one FPDU; returns the index of the rule that
// fires (the first one), or -1.
int decide(Flow& f, Direction dir, uint64_t start, uint8_t opcode, bool tagged, uint64_t fpdu_no)
{
    const auto& rules = g_state->set.rules;
    int fired = -1;
    for (size_t i = 0; i < rules.size(); ++i) {
        const Rule& r = rules[i];
        if (r.direction != dir || r.action == Action::reject) continue;
        if (r.qpn && *r.qpn != f.qpn) continue;
        if (r.local_port && *r.local_port != f.lport) continue;
        if (r.remote_port && *r.remote_port != f.rport) continue;
        if (r.any_port && *r.any_port != f.lport && *r.any_port != f.rport) continue;
        if (r.opcode && !opcode_matches(*r.opcode, opcode)) continue;
        if (r.action == Action::corrupt && !(tagged ? field_in_tagged(r.field) : field_in_untagged(r.field))) continue;
        RuleState& s = f.rs[i];
        ++s.matched;
        if (r.nth_fpdu && s.matched != *r.nth_fpdu) continue;
        if (r.after_octets && start < *r.after_octets) continue;
        if (r.after_ms && Clock::now() - f.begin < std::chrono::milliseconds(*r.after_ms)) continue;
        if (r.probability) {
            if (std::uniform_real_distribution<double>(0.0, 1.0)(f.rng) >= *r.probability) continue;
        } else if (s.fired > 0) {
            continue;
        }
        ++s.fired;
        g_state->fired[i].fetch_add(1, std::memory_order_relaxed);
        if (f.qpn) StatusPublisher::instance().count_fault(f.qpn);  // iwemu status, rdma statistic
        IWEMU_LOG(info, "faults: rule '%s' fired: qp %u, %s FPDU %llu (opcode 0x%x, stream offset %llu)", r.text.c_str(),
                  f.qpn, dir == Direction::tx ? "tx" : "rx", static_cast<unsigned long long>(fpdu_no), opcode,
                  static_cast<unsigned long long>(start));
        if (fired < 0) fired = static_cast<int>(i);
    }
    return fired;
}

// A unit has begun at `start` with header `hdr` (length `len`).
void on_unit(Flow& f, Direction dir, Track& t, uint64_t start, uint64_t len, bool startup)
{
    if (startup) {
        if (t.hdr_len >= 17) {
            if (t.hdr[16] & 0x40) f.crc = true;      // C (RFC 5044 §7.1.1)
            if (t.hdr[16] & 0x80) f.markers = true;  // M
        }
        return;
    }
    ++t.fpdus;
    const uint8_t opcode = t.hdr_len >= 4 ? (t.hdr[3] & 0x0F) : 0xFF;
    const bool tagged = t.hdr_len >= 3 && (t.hdr[2] & 0x80);
    const int i = decide(f, dir, start, opcode, tagged, t.fpdus);
    if (i < 0) return;
    const Rule& r = g_state->set.rules[static_cast<size_t>(i)];
    if (dir == Direction::rx) {
        if (r.action == Action::delay || r.action == Action::stall || r.action == Action::late_read) {
            // Reading stops here, after this FPDU's header (receives are cut
            // there while such rules exist): the rest of it, and all that
            // follows, waits in the socket.
            f.hold_until = std::max(f.hold_until, Clock::now() + std::chrono::milliseconds(r.hold_ms));
        } else if (!f.dropped) {
            f.cut = r.action == Action::drop_rst ? Cut::drop_rst : Cut::drop_fin;
            f.cut_at = f.tx_sent;  // at the next send, or at once (received())
        }
        return;
    }
    switch (r.action) {
    case Action::corrupt_crc:
        f.flips.emplace_back(start + len - 1, 0xFF);  // the CRC's last octet (RFC 5044 §4.1)
        break;
    case Action::corrupt: {
        const auto [off, mask] = field_flip(r.field);
        if (off + 1 > len - wire::mpa_crc_size) break;
        f.flips.emplace_back(start + off, mask);
        if (f.crc) {
            // CRC-32C is affine over XOR: crc(m ^ d) = crc(m) ^ crc(d) ^ crc(0),
            // messages of one length.  So the CRC field is corrected without
            // the FPDU's octets: the receiver must see a sound FPDU whose
            // header is wrong, not a CRC error (RFC 5044 §4.1 covers all
            // but the CRC itself).
            const size_t covered = static_cast<size_t>(len) - wire::mpa_crc_size;
            std::vector<uint8_t> z(covered, 0);
            const uint32_t zero = wire::crc32c(z);
            z[off] = mask;
            uint8_t adj[4];
            wire::store_crc_field(wire::crc32c(z) ^ zero, adj);
            for (size_t k = 0; k < 4; ++k)
                if (adj[k]) f.flips.emplace_back(start + covered + k, adj[k]);
        }
        break;
    }
    case Action::lose:
        f.skips.emplace_back(start, start + len);
        break;
    case Action::delay:
    case Action::stall:
    case Action::late_read:
    case Action::reject:
        break;  // not on sent FPDUs (parse_rules)
    case Action::drop_rst:
    case Action::drop_fin:
    case Action::terminate:
        if (f.cut == Cut::none) {
            f.cut = r.action == Action::drop_rst ? Cut::drop_rst : r.action == Action::drop_fin ? Cut::drop_fin : Cut::terminate;
            f.cut_at = start;
            f.cut_code = r.terminate;
        }
        break;
    }
}

// Follow the octets [from, from + n) of a direction (from <= t.parsed).
void track(Flow& f, Direction dir, Track& t, uint64_t from, const iovec* iov, size_t iovcnt, size_t n)
{
    uint64_t off = from;
    for (size_t i = 0; i < iovcnt && n > 0; ++i) {
        const size_t len = std::min(n, iov[i].iov_len);
        const auto* p = static_cast<const uint8_t*>(iov[i].iov_base);
        n -= len;
        size_t k = 0;
        if (off + len <= t.parsed) {
            off += len;
            continue;
        }
        if (off < t.parsed) k = static_cast<size_t>(t.parsed - off);
        while (k < len) {
            if (dir == Direction::tx && f.cut != Cut::none) return;  // nothing after a cut leaves
            const uint64_t at = off + k;
            if (at < t.unit_end) {
                const size_t take = static_cast<size_t>(std::min<uint64_t>(t.unit_end - at, len - k));
                k += take;
                t.parsed = at + take;
                continue;
            }
            // At a unit boundary: collect its header.
            if (t.hdr_len == 0) t.unit_start = at;
            const bool startup = t.framing.in_startup();
            // Enough to size the unit (CaptureFraming: 20 for a startup
            // frame, 8 for what follows one) and read its RDMAP opcode.
            const size_t need = startup ? 20 : 8;
            const size_t take = std::min(need - t.hdr_len, len - k);
            std::memcpy(t.hdr + t.hdr_len, p + k, take);
            t.hdr_len += take;
            k += take;
            t.parsed = at + take;
            if (t.hdr_len < need) continue;
            const size_t unit = t.framing.unit_length({t.hdr, t.hdr_len});
            if (unit == 0 || t.framing.passing_through()) {
                t.unit_end = UINT64_MAX;  // not MPA, or markers: stop following
                t.hdr_len = 0;
                continue;
            }
            t.framing.unit_taken({t.hdr, t.hdr_len});
            t.unit_end = t.unit_start + unit;
            on_unit(f, dir, t, t.unit_start, unit, startup);
            t.hdr_len = 0;
        }
        off += len;
    }
}

void drop_now(int fd, Flow& f, bool rst, Injected* injected)
{
    if (injected) (rst ? injected->rst : injected->fin) = true;
    f.dropped = true;
    if (rst) {
        // connect(AF_UNSPEC) disconnects a TCP socket abortively (an RST)
        // and leaves the descriptor to its owner.
        sockaddr sa{};
        sa.sa_family = AF_UNSPEC;
        ::connect(fd, &sa, sizeof sa);
    } else {
        ::shutdown(fd, SHUT_RDWR);
    }
}

void send_terminate(int fd, Flow& f, Injected* injected)
{
    f.dropped = true;
    injected->fin = true;
    if (!f.markers) {
        static std::array<uint8_t, 128> fpdu;  // under the state's lock
        std::array<uint8_t, 128> ulpdu{};
        const size_t ul = wire::build_terminate_ulpdu({f.cut_code, {}, std::nullopt}, 1, ulpdu);
        const size_t n = wire::encode_fpdu(fpdu, {ulpdu.data(), ul}, {}, 0, {f.crc, false});
        if (n > 0 && ::send(fd, fpdu.data(), n, MSG_DONTWAIT | MSG_NOSIGNAL) == static_cast<ssize_t>(n))
            injected->octets = {fpdu.data(), n};
    } else {
        IWEMU_LOG(warn, "faults: no Terminate injected with markers on; closing instead");
    }
    ::shutdown(fd, SHUT_WR);  // nothing follows a Terminate (RFC 5040 §5.4)
}

}  // namespace

bool start(const std::string& setting)
{
    if (g_state) return true;  // one rule set per process (test fixtures make several emulators)
    auto parsed = parse_rules(setting);
    if (auto* e = std::get_if<ParseError>(&parsed)) {
        std::fprintf(stderr, "iwemu: IWEMU_FAULTS: position %zu: %s\n  %s\n  %*s^\n", e->position, e->message.c_str(),
                     setting.c_str(), static_cast<int>(e->position - 1), "");
        return false;
    }
    auto set = std::get<RuleSet>(std::move(parsed));
    if (set.rules.empty()) return false;
    g_state = new State;  // never freed: I/O may race process exit
    g_state->set = std::move(set);
    g_state->fired = std::make_unique<std::atomic<uint64_t>[]>(g_state->set.rules.size());
    g_state->reject_rs.resize(g_state->set.rules.size());
    for (const Rule& r : g_state->set.rules) {
        g_state->holds |= r.action == Action::delay || r.action == Action::stall || r.action == Action::late_read;
        g_state->rejects |= r.action == Action::reject;
    }
    // The tally at exit, through the same accessors `iwemu status` uses.
    std::atexit([] {
        for (size_t i = 0; i < rule_count(); ++i)
            IWEMU_LOG(info, "faults: rule '%s' fired %llu time%s in this process", rule_text(i).c_str(),
                      static_cast<unsigned long long>(fired_count(i)), fired_count(i) == 1 ? "" : "s");
    });
    g_state->seed = g_state->set.seed ? *g_state->set.seed : std::random_device{}() | uint64_t{std::random_device{}()} << 32;
    std::fprintf(stderr, "iwemu: faults: %zu rule%s, seed %llu (add ';seed=%llu' to replay)\n", g_state->set.rules.size(),
                 g_state->set.rules.size() == 1 ? "" : "s", static_cast<unsigned long long>(g_state->seed),
                 static_cast<unsigned long long>(g_state->seed));
    return true;
}

bool active() { return g_state != nullptr; }

void begin(int fd)
{
    std::lock_guard<std::mutex> g(g_state->mu);
    g_state->flows.erase(fd);
    flow_locked(fd, 0);
}

ssize_t sendmsg(int fd, const msghdr* msg, int flags, uint32_t qpn, const iovec** sent, size_t* sent_count,
                Injected* injected)
{
    std::lock_guard<std::mutex> g(g_state->mu);
    Flow& f = flow_locked(fd, qpn);
    *sent = msg->msg_iov;
    *sent_count = msg->msg_iovlen;
    size_t total = 0;
    for (size_t i = 0; i < msg->msg_iovlen; ++i) total += msg->msg_iov[i].iov_len;
    if (f.dropped) return ::sendmsg(fd, msg, flags);
    track(f, Direction::tx, f.tx, f.tx_sent, msg->msg_iov, msg->msg_iovlen, total);
    if (f.cut != Cut::none && f.cut_at <= f.tx_sent) {
        if (f.cut == Cut::terminate) send_terminate(fd, f, injected);
        else drop_now(fd, f, f.cut == Cut::drop_rst, injected);
        errno = f.cut == Cut::drop_rst ? ECONNRESET : EPIPE;
        return -1;
    }
    size_t len = total;
    if (f.cut != Cut::none && f.cut_at < f.tx_sent + total) len = static_cast<size_t>(f.cut_at - f.tx_sent);
    const bool flip = std::any_of(f.flips.begin(), f.flips.end(),
                                  [&](const auto& fl) { return fl.first >= f.tx_sent && fl.first < f.tx_sent + len; });
    const uint64_t lo = f.tx_sent, hi = f.tx_sent + len;
    const bool skip = std::any_of(f.skips.begin(), f.skips.end(), [&](const auto& s) { return s.first < hi && s.second > lo; });
    ssize_t n;
    if (skip) {
        // The octets without the lost FPDUs; the caller is told they all left.
        auto& buf = g_state->scratch;
        buf.clear();
        uint64_t at = lo;
        for (size_t i = 0; i < msg->msg_iovlen && at < hi; ++i) {
            const auto* p = static_cast<const uint8_t*>(msg->msg_iov[i].iov_base);
            const size_t take = static_cast<size_t>(std::min<uint64_t>(hi - at, msg->msg_iov[i].iov_len));
            for (size_t k = 0; k < take; ++k) {
                const uint64_t o = at + k;
                if (std::any_of(f.skips.begin(), f.skips.end(), [o](const auto& s) { return o >= s.first && o < s.second; }))
                    continue;
                uint8_t b = p[k];
                for (const auto& [fo, mask] : f.flips)
                    if (fo == o) b ^= mask;
                buf.push_back(b);
            }
            at += take;
        }
        ssize_t m = buf.empty() ? 0 : ::send(fd, buf.data(), buf.size(), flags);
        g_state->scratch_iov = {buf.data(), buf.size()};
        *sent = &g_state->scratch_iov;
        *sent_count = 1;
        injected->sent_octets = m > 0 ? static_cast<size_t>(m) : 0;
        if (m < 0) {
            n = m;
        } else if (static_cast<size_t>(m) == buf.size()) {
            n = static_cast<ssize_t>(len);
        } else {
            // Where the kernel stopped, in the caller's octets.
            uint64_t orig = lo, copied = 0;
            for (const auto& [s, e] : f.skips) {
                if (e <= orig || s >= hi) continue;
                const uint64_t chunk = std::max(s, orig) - orig;
                if (static_cast<uint64_t>(m) <= copied + chunk) break;
                copied += chunk;
                orig = std::min(e, hi);
            }
            n = static_cast<ssize_t>(orig + (static_cast<uint64_t>(m) - copied) - lo);
        }
    } else if (flip || len < total) {
        // The octets as they are to leave, in a copy: user memory and the
        // QP's buffers stay as they are.
        auto& buf = g_state->scratch;
        buf.resize(len);
        size_t at = 0;
        for (size_t i = 0; i < msg->msg_iovlen && at < len; ++i) {
            const size_t take = std::min(len - at, msg->msg_iov[i].iov_len);
            std::memcpy(buf.data() + at, msg->msg_iov[i].iov_base, take);
            at += take;
        }
        for (const auto& [o, mask] : f.flips)
            if (o >= f.tx_sent && o < f.tx_sent + len) buf[static_cast<size_t>(o - f.tx_sent)] ^= mask;
        g_state->scratch_iov = {buf.data(), len};
        n = ::send(fd, buf.data(), len, flags);
        *sent = &g_state->scratch_iov;
        *sent_count = 1;
    } else {
        n = ::sendmsg(fd, msg, flags);
    }
    const int err = errno;
    if (n > 0) {
        f.tx_sent += static_cast<uint64_t>(n);
        std::erase_if(f.flips, [&](const auto& fl) { return fl.first < f.tx_sent; });
        std::erase_if(f.skips, [&](const auto& s) { return s.second <= f.tx_sent; });
    }
    errno = err;
    return n;
}

void forget(int fd)
{
    std::lock_guard<std::mutex> g(g_state->mu);
    g_state->flows.erase(fd);
}

namespace {

void received_locked(int fd, Flow& f, const iovec* iov, size_t iovcnt, size_t n)
{
    if (f.dropped) return;
    track(f, Direction::rx, f.rx, f.rx.parsed, iov, iovcnt, n);
    if (f.cut == Cut::drop_rst || f.cut == Cut::drop_fin) {
        if (f.cut_at <= f.tx_sent) drop_now(fd, f, f.cut == Cut::drop_rst, nullptr);
    }
}

// With hold rules: how much a QP's read may take so that it ends at the
// next FPDU's header (which decides), SIZE_MAX when not following.
size_t read_limit(const Flow& f)
{
    const Track& t = f.rx;
    if (f.dropped || t.framing.in_startup() || t.unit_end == UINT64_MAX) return SIZE_MAX;
    if (t.parsed < t.unit_end) return static_cast<size_t>(t.unit_end - t.parsed) + 8;
    return 8 - std::min<size_t>(t.hdr_len, 7);
}

}  // namespace

ssize_t recvmsg(int fd, msghdr* msg, int flags, uint32_t qpn)
{
    if (flags & MSG_PEEK) return ::recvmsg(fd, msg, flags);
    std::lock_guard<std::mutex> g(g_state->mu);
    Flow& f = flow_locked(fd, qpn);
    if (!g_state->holds || qpn == 0) {
        const ssize_t n = ::recvmsg(fd, msg, flags);
        const int err = errno;
        if (n > 0) received_locked(fd, f, msg->msg_iov, msg->msg_iovlen, static_cast<size_t>(n));
        errno = err;
        return n;
    }
    if (Clock::now() < f.hold_until) {
        errno = EAGAIN;  // rx_fault_hold() parks the QP until then
        return -1;
    }
    size_t limit = read_limit(f);
    iovec iov[24];  // a QP reads into at most 16 SGEs and two more
    msghdr m = *msg;
    if (limit != SIZE_MAX && msg->msg_iovlen <= std::size(iov)) {
        size_t k = 0;
        for (; k < msg->msg_iovlen && limit > 0; ++k) {
            iov[k] = msg->msg_iov[k];
            iov[k].iov_len = std::min(iov[k].iov_len, limit);
            limit -= iov[k].iov_len;
        }
        m.msg_iov = iov;
        m.msg_iovlen = k;
    }
    const ssize_t n = ::recvmsg(fd, &m, flags);
    const int err = errno;
    msg->msg_flags = m.msg_flags;
    if (n > 0) received_locked(fd, f, msg->msg_iov, msg->msg_iovlen, static_cast<size_t>(n));
    errno = err;
    return n;
}

std::optional<std::chrono::steady_clock::time_point> rx_hold_until(int fd)
{
    if (!g_state || !g_state->holds) return std::nullopt;
    std::lock_guard<std::mutex> g(g_state->mu);
    const auto it = g_state->flows.find(fd);
    if (it == g_state->flows.end() || Clock::now() >= it->second->hold_until) return std::nullopt;
    return it->second->hold_until;
}

void rx_hold_release(int fd)
{
    std::lock_guard<std::mutex> g(g_state->mu);
    if (const auto it = g_state->flows.find(fd); it != g_state->flows.end()) it->second->hold_until = {};
}

std::optional<std::string> reject_request(int fd)
{
    if (!g_state || !g_state->rejects) return std::nullopt;
    std::lock_guard<std::mutex> g(g_state->mu);
    Flow& f = flow_locked(fd, 0);
    const auto& rules = g_state->set.rules;
    for (size_t i = 0; i < rules.size(); ++i) {
        const Rule& r = rules[i];
        if (r.action != Action::reject) continue;
        if (r.local_port && *r.local_port != f.lport) continue;
        if (r.remote_port && *r.remote_port != f.rport) continue;
        if (r.any_port && *r.any_port != f.lport && *r.any_port != f.rport) continue;
        RuleState& s = g_state->reject_rs[i];
        ++s.matched;
        if (r.nth_fpdu && s.matched != *r.nth_fpdu) continue;
        if (r.after_ms && Clock::now() - f.begin < std::chrono::milliseconds(*r.after_ms)) continue;
        if (r.probability && std::uniform_real_distribution<double>(0.0, 1.0)(f.rng) >= *r.probability) continue;
        ++s.fired;
        g_state->fired[i].fetch_add(1, std::memory_order_relaxed);
        IWEMU_LOG(info, "faults: rule '%s' fired: connection request %llu (port %u from %u) rejected", r.text.c_str(),
                  static_cast<unsigned long long>(s.matched), f.lport, f.rport);
        return r.private_data;
    }
    return std::nullopt;
}

uint64_t fired_count(size_t rule_index)
{
    if (!g_state || rule_index >= g_state->set.rules.size()) return 0;
    return g_state->fired[rule_index].load(std::memory_order_relaxed);
}

size_t rule_count() { return g_state ? g_state->set.rules.size() : 0; }

std::string rule_text(size_t rule_index)
{
    if (!g_state || rule_index >= g_state->set.rules.size()) return {};
    return g_state->set.rules[rule_index].text;
}

}  // namespace iwemu::faults
