// `iwemu decode` on a capture file: the TCP connections of a pcap/pcapng
// file (a live capture, or one written by IWEMU_CAPTURE) put back together
// into one byte stream per direction, selected by QP number (the
// "iwemu qp=N" packet comments IWEMU_CAPTURE writes) or by port.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "emulator/wire/tcp_frame.h"

namespace iwemu::tools {

struct CapturedDirection {
    wire::tcpframe::Endpoint src, dst;
    std::vector<uint8_t> bytes;    // in stream order, from the first octet after the SYN
    std::string gap;               // why the stream stops early ("" = complete)
};

struct CapturedConnection {
    CapturedDirection a_to_b, b_to_a;  // a: the endpoint that sent the connection's first packet
    std::vector<uint32_t> qpns;        // QP numbers noted for it
};

struct ConnectionChoice {
    std::optional<uint32_t> qpn;
    std::vector<uint16_t> ports;  // each must be one of the connection's two ports
};

// Every TCP connection in the file, in order of first appearance; error set
// when the file cannot be read.
std::vector<CapturedConnection> read_connections(std::span<const uint8_t> file, std::string* error);

// The connections that match `choice` (all, for an empty choice).
std::vector<const CapturedConnection*> choose(const std::vector<CapturedConnection>& all, const ConnectionChoice& choice);

std::string format_endpoint(const wire::tcpframe::Endpoint& e);

}  // namespace iwemu::tools
