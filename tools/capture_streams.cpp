#include "tools/capture_streams.h"

#include <arpa/inet.h>

#include <algorithm>
#include <map>
#include <regex>

#include "emulator/wire/pcapng.h"

namespace iwemu::tools {

namespace {

using wire::tcpframe::Endpoint;

struct DirectionBuild {
    Endpoint src, dst;
    bool have_base = false;
    uint32_t base = 0;                        // sequence number of stream offset 0
    std::map<uint64_t, std::vector<uint8_t>> segments;  // by stream offset
    bool truncated = false;                   // a segment's payload was not captured whole
    uint64_t truncated_at = 0;
};

struct ConnectionBuild {
    DirectionBuild ab, ba;
    std::vector<uint32_t> qpns;
};

void add_segment(DirectionBuild& d, const wire::tcpframe::Parsed& p)
{
    if (p.seg.flags & wire::tcpframe::syn) {
        d.have_base = true;
        d.base = p.seg.seq + 1;
        return;
    }
    if (p.payload_length == 0) return;
    if (!d.have_base) {
        d.have_base = true;  // capture began after the handshake
        d.base = p.seg.seq;
    }
    const uint64_t off = static_cast<uint32_t>(p.seg.seq - d.base);
    if (p.payload.size() < p.payload_length && (!d.truncated || off + p.payload.size() < d.truncated_at)) {
        d.truncated = true;
        d.truncated_at = off + p.payload.size();
    }
    auto& slot = d.segments[off];
    if (p.payload.size() > slot.size()) slot.assign(p.payload.begin(), p.payload.end());
}

CapturedDirection assemble(const DirectionBuild& d)
{
    CapturedDirection out;
    out.src = d.src;
    out.dst = d.dst;
    uint64_t pos = 0;
    for (const auto& [off, bytes] : d.segments) {
        if (off > pos) {
            out.gap = "octets " + std::to_string(pos) + ".." + std::to_string(off - 1) + " not captured";
            break;
        }
        if (off + bytes.size() <= pos) continue;  // a retransmission of what we have
        out.bytes.insert(out.bytes.end(), bytes.begin() + static_cast<std::ptrdiff_t>(pos - off), bytes.end());
        pos = off + bytes.size();
    }
    if (d.truncated && d.truncated_at <= out.bytes.size()) {
        out.bytes.resize(d.truncated_at);
        out.gap = "payload cut at stream offset " + std::to_string(d.truncated_at) +
                  " (snap length or IWEMU_CAPTURE_PAYLOAD)";
    }
    return out;
}

}  // namespace

std::string format_endpoint(const Endpoint& e)
{
    char buf[INET6_ADDRSTRLEN] = {};
    inet_ntop(e.v6 ? AF_INET6 : AF_INET, e.addr.data(), buf, sizeof buf);
    return e.v6 ? "[" + std::string(buf) + "]:" + std::to_string(e.port) : std::string(buf) + ":" + std::to_string(e.port);
}

std::vector<CapturedConnection> read_connections(std::span<const uint8_t> file, std::string* error)
{
    const auto r = wire::pcapng::read_capture(file);
    if (!r.error.empty() && error) *error = r.error;
    std::vector<ConnectionBuild> builds;
    static const std::regex qp_note("iwemu qp=([0-9]+)");
    for (const auto& pkt : r.packets) {
        const auto p = wire::tcpframe::parse_frame(pkt.linktype, pkt.data);
        if (!p) continue;
        auto it = std::find_if(builds.begin(), builds.end(), [&](const ConnectionBuild& c) {
            return (c.ab.src == p->seg.src && c.ab.dst == p->seg.dst) || (c.ab.src == p->seg.dst && c.ab.dst == p->seg.src);
        });
        // A SYN without ACK on a known pair: the ports were used again.
        if (it != builds.end() && (p->seg.flags & (wire::tcpframe::syn | wire::tcpframe::ack)) == wire::tcpframe::syn &&
            it->ab.have_base)
            it = builds.end();
        if (it == builds.end()) {
            builds.emplace_back();
            it = builds.end() - 1;
            it->ab.src = it->ba.dst = p->seg.src;
            it->ab.dst = it->ba.src = p->seg.dst;
        }
        add_segment(it->ab.src == p->seg.src && it->ab.dst == p->seg.dst ? it->ab : it->ba, *p);
        for (std::sregex_iterator m(pkt.comment.begin(), pkt.comment.end(), qp_note), e; m != e; ++m)
            it->qpns.push_back(static_cast<uint32_t>(std::stoul((*m)[1].str())));
    }
    std::vector<CapturedConnection> out;
    for (const auto& b : builds) out.push_back({assemble(b.ab), assemble(b.ba), b.qpns});
    return out;
}

std::vector<const CapturedConnection*> choose(const std::vector<CapturedConnection>& all, const ConnectionChoice& choice)
{
    std::vector<const CapturedConnection*> out;
    for (const auto& c : all) {
        if (choice.qpn && std::find(c.qpns.begin(), c.qpns.end(), *choice.qpn) == c.qpns.end()) continue;
        bool ok = true;
        for (uint16_t p : choice.ports)
            ok = ok && (c.a_to_b.src.port == p || c.a_to_b.dst.port == p);
        if (ok) out.push_back(&c);
    }
    return out;
}

}  // namespace iwemu::tools
