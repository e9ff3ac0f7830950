// The iwemu-specific ULP private data of the MPA Request / Reply that
// connects two QPs set up with ibv_modify_qp(RTR, AV + dest QPN) instead of
// rdma_cm (docs/oob-connect.md).  Pure codec over byte spans: no I/O, no
// allocation.  All fields in network byte order.
//
//   0        4        5        6        7        8              12             16
//   +--------+--------+--------+--------+--------+--------------+--------------+
//   | magic "iwOB"    | version| kind   | reason | rsvd | target QPN | source QPN |
//   +-----------------+--------+--------+--------+------+------------+------------+
//   (magic 4 octets, version/kind/reason/reserved 1 octet each, QPNs 4 octets)
//
// Request (kind 1): target = the Responder's QP, source = the Initiator's QP.
// Reject  (kind 2, in a Reply with R=1): QPNs echoed, reason says why.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>

namespace iwemu::cm {

inline constexpr uint32_t oob_magic = 0x69774F42;  // "iwOB"
inline constexpr uint8_t oob_version = 1;
inline constexpr size_t oob_private_data_size = 16;

enum class OobKind : uint8_t { request = 1, reject = 2 };

enum class OobRejectReason : uint8_t {
    none = 0,
    no_such_qp = 1,      // target QPN names no QP of this process
    peer_mismatch = 2,   // the target QP's RTR named another (address, QPN)
    not_responder = 3,   // the target QP is itself the Initiator (GIDs disagree)
    qp_state = 4,        // the target QP cannot take a connection (ERROR, already connected)
};

const char* to_string(OobRejectReason r);

struct OobPrivateData {
    OobKind kind = OobKind::request;
    OobRejectReason reason = OobRejectReason::none;
    uint32_t target_qpn = 0;
    uint32_t source_qpn = 0;
};

// Writes oob_private_data_size octets; returns that size, or 0 if out is too short.
size_t encode_oob_private_data(const OobPrivateData& pd, std::span<uint8_t> out);
// nullopt: not ours (wrong size, magic or version, unknown kind, QPN above 24 bits).
std::optional<OobPrivateData> decode_oob_private_data(std::span<const uint8_t> in);

}  // namespace iwemu::cm
