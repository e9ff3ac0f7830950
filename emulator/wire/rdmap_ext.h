// RDMAP extensions, RFC 7306: Immediate Data (§6.2), Atomic Request
// (§5.2.1) and Atomic Response (§5.2.2) headers; WIRE.md §8.5-§8.7.
// Each follows the untagged DDP header; none carries ULP payload.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>

#include "emulator/wire/network_order.h"
#include "emulator/wire/rdmap_opcode.h"

namespace iwemu::wire {

// RFC 7306 §6.2: 8 opaque octets (opcodes 0x8 and 0x9, QN 0).
struct ImmediateData {
    std::array<uint8_t, immediate_data_size> data{};
    constexpr bool operator==(const ImmediateData&) const = default;
};

// RFC 7306 §5.2.1 AOpCode (low 4 bits of the first word).
enum class AtomicOpcode : uint8_t {
    fetch_add = 0x0,
    compare_swap = 0x2,  // 0x1 reserved (decision 12: unsupported)
};

struct AtomicRequestHeader {
    uint32_t reserved = 0;    // upper 28 bits of the first word, as received
    uint8_t aopcode = 0;      // AOpCode (4 bits), see AtomicOpcode
    uint32_t request_identifier = 0;
    uint32_t remote_stag = 0;
    uint64_t remote_to = 0;   // must be 64-bit aligned (RFC 7306 §5.1)
    uint64_t add_or_swap_data = 0;
    uint64_t add_or_swap_mask = 0;
    uint64_t compare_data = 0;
    uint64_t compare_mask = 0;
    constexpr bool operator==(const AtomicRequestHeader&) const = default;
};

struct AtomicResponseHeader {
    uint32_t original_request_identifier = 0;
    uint64_t original_remote_data_value = 0;
    constexpr bool operator==(const AtomicResponseHeader&) const = default;
};

constexpr std::optional<ImmediateData> decode_immediate_data(std::span<const uint8_t> body)
{
    if (body.size() < immediate_data_size)
        return std::nullopt;
    ImmediateData d;
    for (size_t i = 0; i < immediate_data_size; ++i)
        d.data[i] = body[i];
    return d;
}

constexpr size_t encode_immediate_data(const ImmediateData& d, std::span<uint8_t> out)
{
    if (out.size() < immediate_data_size)
        return 0;
    for (size_t i = 0; i < immediate_data_size; ++i)
        out[i] = d.data[i];
    return immediate_data_size;
}

constexpr std::optional<AtomicRequestHeader> decode_atomic_request(std::span<const uint8_t> body)
{
    if (body.size() < atomic_request_header_size)
        return std::nullopt;
    const uint8_t* p = body.data();
    const uint32_t word0 = be::load32(p);
    return AtomicRequestHeader{word0 >> 4,         static_cast<uint8_t>(word0 & 0xF), be::load32(p + 4),
                               be::load32(p + 8),  be::load64(p + 12),                be::load64(p + 20),
                               be::load64(p + 28), be::load64(p + 36),                be::load64(p + 44)};
}

constexpr size_t encode_atomic_request(const AtomicRequestHeader& h, std::span<uint8_t> out)
{
    if (out.size() < atomic_request_header_size)
        return 0;
    uint8_t* p = out.data();
    be::store32(p, (h.reserved << 4) | (h.aopcode & 0xFu));
    be::store32(p + 4, h.request_identifier);
    be::store32(p + 8, h.remote_stag);
    be::store64(p + 12, h.remote_to);
    be::store64(p + 20, h.add_or_swap_data);
    be::store64(p + 28, h.add_or_swap_mask);
    be::store64(p + 36, h.compare_data);
    be::store64(p + 44, h.compare_mask);
    return atomic_request_header_size;
}

constexpr std::optional<AtomicResponseHeader> decode_atomic_response(std::span<const uint8_t> body)
{
    if (body.size() < atomic_response_header_size)
        return std::nullopt;
    return AtomicResponseHeader{be::load32(body.data()), be::load64(body.data() + 4)};
}

constexpr size_t encode_atomic_response(const AtomicResponseHeader& h, std::span<uint8_t> out)
{
    if (out.size() < atomic_response_header_size)
        return 0;
    be::store32(out.data(), h.original_request_identifier);
    be::store64(out.data() + 4, h.original_remote_data_value);
    return atomic_response_header_size;
}

}  // namespace iwemu::wire
