// pcapng (IETF draft-ietf-opsawg-pcapng, "PCAP Next Generation Capture File
// Format"): the three blocks a capture needs to write (Section Header,
// Interface Description, Enhanced Packet) and a reader for the blocks other
// tools write (those three, Simple Packet, and classic pcap files).
// Pure: writers append to a byte vector, the reader walks a byte span.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace iwemu::wire::pcapng {

// Block types (pcapng §4).
inline constexpr uint32_t block_shb = 0x0A0D0D0A;
inline constexpr uint32_t block_idb = 0x00000001;
inline constexpr uint32_t block_spb = 0x00000003;
inline constexpr uint32_t block_epb = 0x00000006;
inline constexpr uint32_t byte_order_magic = 0x1A2B3C4D;

// LINKTYPE_* values (tcpdump.org link-layer header types).
inline constexpr uint16_t linktype_null = 0;
inline constexpr uint16_t linktype_ethernet = 1;
inline constexpr uint16_t linktype_raw = 101;
inline constexpr uint16_t linktype_loop = 108;
inline constexpr uint16_t linktype_linux_sll = 113;
inline constexpr uint16_t linktype_linux_sll2 = 276;

// Section Header Block (§4.1), version 1.0, section length unknown (-1),
// with shb_userappl naming the writer.
void append_section_header(std::vector<uint8_t>& out, std::string_view user_application);

// Interface Description Block (§4.2) with if_tsresol = 6 (microseconds,
// the default, written out for readers that want it).
void append_interface(std::vector<uint8_t>& out, uint16_t linktype, uint32_t snaplen, std::string_view name);

// Enhanced Packet Block (§4.3): `captured` is the packet as far as it was
// kept (snap length), `original_length` its length on the wire; `comment`
// becomes an opt_comment when not empty.
void append_enhanced_packet(std::vector<uint8_t>& out, uint32_t interface_id, uint64_t timestamp_us,
                            std::span<const uint8_t> captured, uint32_t original_length, std::string_view comment = {});

// One packet as read back.
struct Packet {
    uint16_t linktype = 0;
    uint64_t timestamp_us = 0;
    std::span<const uint8_t> data;  // captured octets (into the file's bytes)
    uint32_t original_length = 0;
    std::string comment;            // first opt_comment, if any
};

struct ReadResult {
    std::vector<Packet> packets;
    std::string error;  // empty: the whole file was read
};

// Read a pcapng (any byte order, several sections) or classic pcap file
// (µs or ns timestamps, either byte order).  Packets point into `file`.
ReadResult read_capture(std::span<const uint8_t> file);

}  // namespace iwemu::wire::pcapng
