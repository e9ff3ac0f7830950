// Ethernet / IPv4 / IPv6 / TCP headers as a capture shows them: built for a
// synthesized capture of a socket's byte stream (RFC 791, RFC 8200, RFC 9293,
// IEEE 802.3 Ethernet II), and parsed back out of captured frames of the
// link types dumpcap writes for Linux interfaces.  Pure.
#pragma once

#include <array>
#include <cstdint>
#include <optional>
#include <span>

namespace iwemu::wire::tcpframe {

// An address and port; IPv4 addresses are kept as v4 (not v4-mapped).
struct Endpoint {
    bool v6 = false;
    std::array<uint8_t, 16> addr{};  // v4: first four octets
    uint16_t port = 0;
    bool operator==(const Endpoint&) const = default;
};

// TCP flags (RFC 9293 §3.1).
inline constexpr uint8_t fin = 0x01;
inline constexpr uint8_t syn = 0x02;
inline constexpr uint8_t rst = 0x04;
inline constexpr uint8_t psh = 0x08;
inline constexpr uint8_t ack = 0x10;

inline constexpr size_t ethernet_header = 14;
inline constexpr size_t ipv4_header = 20;
inline constexpr size_t ipv6_header = 40;
inline constexpr size_t tcp_header = 20;  // no options
inline constexpr size_t max_headers = ethernet_header + ipv6_header + tcp_header;
// Most payload one synthesized segment carries: what keeps the IPv4 total
// length (and the IPv6 payload length) within 16 bits.
inline constexpr size_t max_segment_payload = 65535 - ipv4_header - tcp_header;

struct Segment {
    Endpoint src, dst;
    uint32_t seq = 0, ack = 0;
    uint8_t flags = 0;
    uint16_t window = 65535;
};

// Write the Ethernet, IP and TCP headers of `s` carrying `payload` into
// `out` (at least max_headers octets); returns the headers' length.  The IP
// and TCP checksums are computed (the TCP one over `payload` as well).
size_t build_headers(const Segment& s, std::span<const uint8_t> payload, uint8_t* out);

// A TCP segment found in a captured frame.
struct Parsed {
    Segment seg;
    std::span<const uint8_t> payload;  // as captured (may be cut by the snap length)
    uint32_t payload_length = 0;       // from the IP header: the length on the wire
};

// Parse a frame of the given LINKTYPE (Ethernet incl. 802.1Q, Linux SLL and
// SLL2, raw IP, BSD loopback).  nullopt: not TCP over IP, or too short.
std::optional<Parsed> parse_frame(uint16_t linktype, std::span<const uint8_t> frame);

}  // namespace iwemu::wire::tcpframe
