#include "emulator/cm/oob_private_data.h"

namespace iwemu::cm {
namespace {

void put32(uint8_t* p, uint32_t v)
{
    p[0] = static_cast<uint8_t>(v >> 24);
    p[1] = static_cast<uint8_t>(v >> 16);
    p[2] = static_cast<uint8_t>(v >> 8);
    p[3] = static_cast<uint8_t>(v);
}

uint32_t get32(const uint8_t* p)
{
    return (uint32_t{p[0]} << 24) | (uint32_t{p[1]} << 16) | (uint32_t{p[2]} << 8) | p[3];
}

}  // namespace

const char* to_string(OobRejectReason r)
{
    switch (r) {
    case OobRejectReason::none: return "none";
    case OobRejectReason::no_such_qp: return "no such QP";
    case OobRejectReason::peer_mismatch: return "QP expects another peer";
    case OobRejectReason::not_responder: return "QP is the initiator itself";
    case OobRejectReason::qp_state: return "QP cannot take a connection";
    }
    return "unknown";
}

size_t encode_oob_private_data(const OobPrivateData& pd, std::span<uint8_t> out)
{
    if (out.size() < oob_private_data_size) return 0;
    uint8_t* p = out.data();
    put32(p, oob_magic);
    p[4] = oob_version;
    p[5] = static_cast<uint8_t>(pd.kind);
    p[6] = static_cast<uint8_t>(pd.reason);
    p[7] = 0;
    put32(p + 8, pd.target_qpn);
    put32(p + 12, pd.source_qpn);
    return oob_private_data_size;
}

std::optional<OobPrivateData> decode_oob_private_data(std::span<const uint8_t> in)
{
    // A later version may append fields: accept a longer frame with our prefix.
    if (in.size() < oob_private_data_size) return std::nullopt;
    const uint8_t* p = in.data();
    if (get32(p) != oob_magic || p[4] != oob_version) return std::nullopt;
    if (p[5] != static_cast<uint8_t>(OobKind::request) && p[5] != static_cast<uint8_t>(OobKind::reject))
        return std::nullopt;
    OobPrivateData pd;
    pd.kind = static_cast<OobKind>(p[5]);
    pd.reason = p[6] <= static_cast<uint8_t>(OobRejectReason::qp_state) ? static_cast<OobRejectReason>(p[6])
                                                                        : OobRejectReason::none;
    pd.target_qpn = get32(p + 8);
    pd.source_qpn = get32(p + 12);
    if (pd.target_qpn > 0xFFFFFF || pd.source_qpn > 0xFFFFFF) return std::nullopt;
    return pd;
}

}  // namespace iwemu::cm
