#include "emulator/wire/tcp_frame.h"

#include <cstring>

#include "emulator/wire/network_order.h"
#include "emulator/wire/pcapng.h"

namespace iwemu::wire::tcpframe {

namespace {

constexpr uint16_t ethertype_ipv4 = 0x0800;
constexpr uint16_t ethertype_ipv6 = 0x86DD;
constexpr uint16_t ethertype_vlan = 0x8100;
constexpr uint8_t proto_tcp = 6;

// RFC 1071 one's-complement sum, continued over several pieces (each piece
// is summed as if it started at an even offset: callers keep them even
// except the last).
uint32_t sum16(uint32_t acc, std::span<const uint8_t> d)
{
    size_t i = 0;
    for (; i + 1 < d.size(); i += 2) acc += be::load16(d.data() + i);
    if (i < d.size()) acc += uint32_t{d[i]} << 8;
    return acc;
}

uint16_t fold(uint32_t acc)
{
    while (acc >> 16) acc = (acc & 0xFFFF) + (acc >> 16);
    return static_cast<uint16_t>(~acc);
}

}  // namespace

size_t build_headers(const Segment& s, std::span<const uint8_t> payload, uint8_t* out)
{
    // Ethernet II: locally administered unicast addresses, 02:00:00:00:00:01
    // for the lower endpoint, :02 for the other, so each side keeps its MAC.
    uint8_t* p = out;
    const bool src_low = std::memcmp(s.src.addr.data(), s.dst.addr.data(), 16) < 0 ||
                         (s.src.addr == s.dst.addr && s.src.port < s.dst.port);
    const uint8_t mac_low[6] = {0x02, 0, 0, 0, 0, 0x01}, mac_high[6] = {0x02, 0, 0, 0, 0, 0x02};
    std::memcpy(p, src_low ? mac_high : mac_low, 6);      // destination
    std::memcpy(p + 6, src_low ? mac_low : mac_high, 6);  // source
    be::store16(p + 12, s.src.v6 ? ethertype_ipv6 : ethertype_ipv4);
    p += ethernet_header;

    const uint16_t tcp_len = static_cast<uint16_t>(tcp_header + payload.size());
    uint32_t pseudo = 0;
    if (!s.src.v6) {
        std::memset(p, 0, ipv4_header);
        p[0] = 0x45;  // version 4, IHL 5
        be::store16(p + 2, static_cast<uint16_t>(ipv4_header + tcp_len));
        p[6] = 0x40;  // DF
        p[8] = 64;    // TTL
        p[9] = proto_tcp;
        std::memcpy(p + 12, s.src.addr.data(), 4);
        std::memcpy(p + 16, s.dst.addr.data(), 4);
        be::store16(p + 10, fold(sum16(0, {p, ipv4_header})));
        pseudo = sum16(sum16(0, {p + 12, 8}), {});
        pseudo += proto_tcp + tcp_len;
        p += ipv4_header;
    } else {
        std::memset(p, 0, ipv6_header);
        p[0] = 0x60;
        be::store16(p + 4, tcp_len);
        p[6] = proto_tcp;
        p[7] = 64;
        std::memcpy(p + 8, s.src.addr.data(), 16);
        std::memcpy(p + 24, s.dst.addr.data(), 16);
        pseudo = sum16(0, {p + 8, 32});
        pseudo += proto_tcp + tcp_len;
        p += ipv6_header;
    }
    std::memset(p, 0, tcp_header);
    be::store16(p, s.src.port);
    be::store16(p + 2, s.dst.port);
    be::store32(p + 4, s.seq);
    be::store32(p + 8, (s.flags & ack) ? s.ack : 0);
    p[12] = (tcp_header / 4) << 4;
    p[13] = s.flags;
    be::store16(p + 14, s.window);
    be::store16(p + 16, fold(sum16(sum16(pseudo, {p, tcp_header}), payload)));
    p += tcp_header;
    return static_cast<size_t>(p - out);
}

std::optional<Parsed> parse_frame(uint16_t linktype, std::span<const uint8_t> f)
{
    size_t at = 0;
    uint16_t ethertype = 0;
    switch (linktype) {
    case pcapng::linktype_ethernet:
        if (f.size() < ethernet_header) return std::nullopt;
        ethertype = be::load16(f.data() + 12);
        at = ethernet_header;
        while (ethertype == ethertype_vlan && f.size() >= at + 4) {
            ethertype = be::load16(f.data() + at + 2);
            at += 4;
        }
        break;
    case pcapng::linktype_linux_sll:
        if (f.size() < 16) return std::nullopt;
        ethertype = be::load16(f.data() + 14);
        at = 16;
        break;
    case pcapng::linktype_linux_sll2:
        if (f.size() < 20) return std::nullopt;
        ethertype = be::load16(f.data());
        at = 20;
        break;
    case pcapng::linktype_raw:
        if (f.empty()) return std::nullopt;
        ethertype = (f[0] >> 4) == 6 ? ethertype_ipv6 : ethertype_ipv4;
        break;
    case pcapng::linktype_null:
    case pcapng::linktype_loop:
        if (f.size() < 5) return std::nullopt;
        at = 4;
        ethertype = (f[4] >> 4) == 6 ? ethertype_ipv6 : ethertype_ipv4;
        break;
    default:
        return std::nullopt;
    }
    Parsed r;
    size_t ip_payload_len = 0;
    if (ethertype == ethertype_ipv4) {
        if (f.size() < at + ipv4_header || (f[at] >> 4) != 4) return std::nullopt;
        const size_t ihl = (f[at] & 0x0F) * 4u;
        const uint16_t total = be::load16(f.data() + at + 2);
        if (ihl < ipv4_header || f[at + 9] != proto_tcp || total < ihl || f.size() < at + ihl) return std::nullopt;
        if ((be::load16(f.data() + at + 6) & 0x3FFF) != 0) return std::nullopt;  // fragments: not ours to reassemble
        std::memcpy(r.seg.src.addr.data(), f.data() + at + 12, 4);
        std::memcpy(r.seg.dst.addr.data(), f.data() + at + 16, 4);
        ip_payload_len = total - ihl;
        at += ihl;
    } else if (ethertype == ethertype_ipv6) {
        if (f.size() < at + ipv6_header || f[at + 6] != proto_tcp) return std::nullopt;  // no extension headers
        r.seg.src.v6 = r.seg.dst.v6 = true;
        std::memcpy(r.seg.src.addr.data(), f.data() + at + 8, 16);
        std::memcpy(r.seg.dst.addr.data(), f.data() + at + 24, 16);
        ip_payload_len = be::load16(f.data() + at + 4);
        at += ipv6_header;
    } else {
        return std::nullopt;
    }
    if (f.size() < at + tcp_header) return std::nullopt;
    const uint8_t* t = f.data() + at;
    const size_t doff = (t[12] >> 4) * 4u;
    if (doff < tcp_header || ip_payload_len < doff || f.size() < at + doff) return std::nullopt;
    r.seg.src.port = be::load16(t);
    r.seg.dst.port = be::load16(t + 2);
    r.seg.seq = be::load32(t + 4);
    r.seg.ack = be::load32(t + 8);
    r.seg.flags = t[13];
    r.seg.window = be::load16(t + 14);
    r.payload_length = static_cast<uint32_t>(ip_payload_len - doff);
    const size_t have = f.size() - at - doff;
    r.payload = f.subspan(at + doff, std::min<size_t>(have, r.payload_length));
    return r;
}

}  // namespace iwemu::wire::tcpframe
