// RDMA Read Request header, RFC 5040 §4.4 (App. A.2), WIRE.md §8.3: the 28
// octets right after the untagged DDP header (QN 1) of opcode 0x1.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>

#include "emulator/wire/network_order.h"
#include "emulator/wire/rdmap_opcode.h"

namespace iwemu::wire {

struct RdmaReadRequestHeader {
    uint32_t data_sink_stag = 0;       // where the data goes, at the requester
    uint64_t data_sink_to = 0;         // Data Sink Tagged Offset
    uint32_t rdma_read_message_size = 0;  // octets, 0 … 2^32-1 (0: RTR, RFC 6581)
    uint32_t data_source_stag = 0;     // where the data is read, at the responder
    uint64_t data_source_to = 0;       // Data Source Tagged Offset

    constexpr bool operator==(const RdmaReadRequestHeader&) const = default;
};

// body = the octets after the DDP header; nullopt if shorter than 28.
constexpr std::optional<RdmaReadRequestHeader> decode_read_request(std::span<const uint8_t> body)
{
    if (body.size() < rdma_read_request_header_size)
        return std::nullopt;
    const uint8_t* p = body.data();
    return RdmaReadRequestHeader{be::load32(p), be::load64(p + 4), be::load32(p + 12), be::load32(p + 16),
                                 be::load64(p + 20)};
}

// Returns 28, or 0 if out is too small.
constexpr size_t encode_read_request(const RdmaReadRequestHeader& h, std::span<uint8_t> out)
{
    if (out.size() < rdma_read_request_header_size)
        return 0;
    uint8_t* p = out.data();
    be::store32(p, h.data_sink_stag);
    be::store64(p + 4, h.data_sink_to);
    be::store32(p + 12, h.rdma_read_message_size);
    be::store32(p + 16, h.data_source_stag);
    be::store64(p + 20, h.data_source_to);
    return rdma_read_request_header_size;
}

// RFC 5040 §4.8 (RDMAP-017): a Terminate for a Read that was partly served
// echoes the Read Request header advanced past the octets already sent:
// both Tagged Offsets move forward, the size shrinks.
constexpr RdmaReadRequestHeader advance_read_request(const RdmaReadRequestHeader& h, uint32_t octets_sent)
{
    const uint32_t sent = octets_sent < h.rdma_read_message_size ? octets_sent : h.rdma_read_message_size;
    return RdmaReadRequestHeader{h.data_sink_stag, h.data_sink_to + sent, h.rdma_read_message_size - sent,
                                 h.data_source_stag, h.data_source_to + sent};
}

}  // namespace iwemu::wire
