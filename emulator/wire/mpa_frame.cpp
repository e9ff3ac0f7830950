// MPA Request / Reply / Rtr frame codec (RFC 5044 §7.1.1, RFC 6581 §6/§9,
// seed-002 proposal).  Parsing is incremental: it looks only at the octets
// received so far and reports an error as soon as they prove one.
#include "emulator/wire/mpa_frame.h"

#include <algorithm>
#include <cstring>

namespace iwemu::wire {
namespace {

constexpr size_t flags_offset = 16;
constexpr size_t rev_offset = 17;
constexpr size_t pd_length_offset = 18;

// Revisions iwemu works with: 1 (RFC 5044) and 2 (RFC 6581); Rev 0 (RDMA
// Consortium, RFC 5044 Appendix C) only when the caller asks (MPA-057).
constexpr bool revision_supported(uint8_t rev, bool accept_rev0)
{
    return rev == 1 || rev == 2 || (rev == 0 && accept_rev0);
}

bool key_prefix_matches(const MpaKey& key, std::span<const uint8_t> got)
{
    // An empty span may carry a null pointer, which memcmp must never see.
    const size_t n = std::min(got.size(), key.size());
    return n == 0 || std::memcmp(key.data(), got.data(), n) == 0;
}

// Candidate keys for `type`; the Rtr frame has two accepted spellings.
bool prefix_allowed(std::span<const uint8_t> got, MpaFrameType type)
{
    switch (type) {
    case MpaFrameType::request: return key_prefix_matches(mpa_request_key, got);
    case MpaFrameType::reply: return key_prefix_matches(mpa_reply_key, got);
    case MpaFrameType::rtr:
        return key_prefix_matches(mpa_rtr_key, got) || key_prefix_matches(mpa_rtr_key_as_named, got);
    }
    return false;
}

bool prefix_allowed(std::span<const uint8_t> got, std::optional<MpaFrameType> expected)
{
    if (expected) return prefix_allowed(got, *expected);
    return prefix_allowed(got, MpaFrameType::request) || prefix_allowed(got, MpaFrameType::reply) ||
           prefix_allowed(got, MpaFrameType::rtr);
}

MpaParseResult status_only(MpaParseStatus status, size_t need = 0)
{
    MpaParseResult r;
    r.status = status;
    r.need = need;
    return r;
}

MpaParseResult need_or_truncated(size_t need, bool end_of_stream)
{
    return end_of_stream ? status_only(MpaParseStatus::truncated)
                         : status_only(MpaParseStatus::need_more, need);
}

}  // namespace

std::string_view to_string(MpaParseStatus status)
{
    switch (status) {
    case MpaParseStatus::complete: return "complete";
    case MpaParseStatus::need_more: return "need more octets";
    case MpaParseStatus::bad_key: return "unexpected MPA key";
    case MpaParseStatus::bad_revision: return "unsupported MPA revision";
    case MpaParseStatus::pd_length_too_large: return "PD_Length exceeds 512";
    case MpaParseStatus::truncated: return "stream ended inside the MPA frame";
    case MpaParseStatus::enhanced_data_missing: return "S=1 but PD_Length < 4 (no enhanced data)";
    }
    return "?";
}

std::optional<TerminateCode> terminate_code(MpaParseStatus status)
{
    switch (status) {
    case MpaParseStatus::complete:
    case MpaParseStatus::need_more:
        return std::nullopt;
    case MpaParseStatus::bad_key:
    case MpaParseStatus::bad_revision:
    case MpaParseStatus::pd_length_too_large:
    case MpaParseStatus::truncated:
    case MpaParseStatus::enhanced_data_missing:
        break;
    }
    return TerminateCode{TerminateLayer::llp, etype::llp_mpa, ecode::mpa_invalid_request_or_reply};
}

std::optional<MpaFrameType> mpa_frame_type_of_key(std::span<const uint8_t> key)
{
    if (key.size() < mpa_key_size) return std::nullopt;
    key = key.first(mpa_key_size);
    if (std::equal(key.begin(), key.end(), mpa_request_key.begin())) return MpaFrameType::request;
    if (std::equal(key.begin(), key.end(), mpa_reply_key.begin())) return MpaFrameType::reply;
    if (std::equal(key.begin(), key.end(), mpa_rtr_key.begin()) ||
        std::equal(key.begin(), key.end(), mpa_rtr_key_as_named.begin()))
        return MpaFrameType::rtr;
    return std::nullopt;
}

MpaEnhancedData decode_mpa_enhanced_data(std::span<const uint8_t, mpa_enhanced_data_size> in)
{
    const uint16_t w0 = static_cast<uint16_t>(in[0] << 8 | in[1]);
    const uint16_t w1 = static_cast<uint16_t>(in[2] << 8 | in[3]);
    MpaEnhancedData d;
    d.peer_to_peer = w0 & 0x8000;
    d.zero_length_send_rtr = w0 & 0x4000;
    d.ird = w0 & mpa_ird_ord_max;
    d.zero_length_write_rtr = w1 & 0x8000;
    d.zero_length_read_rtr = w1 & 0x4000;
    d.ord = w1 & mpa_ird_ord_max;
    return d;
}

void encode_mpa_enhanced_data(const MpaEnhancedData& d, std::span<uint8_t, mpa_enhanced_data_size> out)
{
    const uint16_t w0 = static_cast<uint16_t>((d.peer_to_peer ? 0x8000 : 0) |
                                              (d.zero_length_send_rtr ? 0x4000 : 0) |
                                              (d.ird & mpa_ird_ord_max));
    const uint16_t w1 = static_cast<uint16_t>((d.zero_length_write_rtr ? 0x8000 : 0) |
                                              (d.zero_length_read_rtr ? 0x4000 : 0) |
                                              (d.ord & mpa_ird_ord_max));
    out[0] = static_cast<uint8_t>(w0 >> 8);
    out[1] = static_cast<uint8_t>(w0);
    out[2] = static_cast<uint8_t>(w1 >> 8);
    out[3] = static_cast<uint8_t>(w1);
}

MpaParseResult parse_mpa_frame(std::span<const uint8_t> bytes, std::optional<MpaFrameType> expected,
                               bool end_of_stream, bool accept_rev0)
{
    // Key: compare the prefix we have (RFC 5044 §7.1.2 rule 5: all 16 octets).
    if (!prefix_allowed(bytes, expected)) return status_only(MpaParseStatus::bad_key);
    if (bytes.size() <= rev_offset) {
        if (bytes.size() < mpa_key_size)
            return need_or_truncated(mpa_frame_header_size - bytes.size(), end_of_stream);
    } else if (!revision_supported(bytes[rev_offset], accept_rev0)) {
        return status_only(MpaParseStatus::bad_revision);
    }
    if (bytes.size() < mpa_frame_header_size)
        return need_or_truncated(mpa_frame_header_size - bytes.size(), end_of_stream);

    const uint8_t flags = bytes[flags_offset];
    const uint8_t rev = bytes[rev_offset];
    const uint16_t pd_length =
        static_cast<uint16_t>(bytes[pd_length_offset] << 8 | bytes[pd_length_offset + 1]);
    if (pd_length > mpa_max_pd_length) return status_only(MpaParseStatus::pd_length_too_large);

    const bool s = flags & mpa_flag::s;
    // RFC 6581 §6: with Rev >= 2, S = 1 means the enhanced data is present.
    // The seed-002 Rtr frame keeps S = 0 and is never enhanced.
    const auto type = mpa_frame_type_of_key(bytes);
    const bool enhanced = s && rev >= 2 && type != MpaFrameType::rtr;
    if (enhanced && pd_length < mpa_enhanced_data_size)
        return status_only(MpaParseStatus::enhanced_data_missing);

    const size_t frame_size = mpa_frame_header_size + pd_length;
    if (bytes.size() < frame_size) return need_or_truncated(frame_size - bytes.size(), end_of_stream);

    MpaParseResult r;
    r.status = MpaParseStatus::complete;
    r.frame_size = frame_size;
    MpaFrame& f = r.frame;
    f.type = *type;
    f.rtr_key_as_named = f.type == MpaFrameType::rtr && bytes[9] == mpa_rtr_key_as_named[9];
    f.marker = flags & mpa_flag::m;
    f.crc = flags & mpa_flag::c;
    f.reject = flags & mpa_flag::r;
    f.s = s;
    f.res = flags & mpa_flag::res;
    f.rev = rev;
    auto pd = bytes.subspan(mpa_frame_header_size, pd_length);
    if (enhanced) {
        f.enhanced = decode_mpa_enhanced_data(pd.first<mpa_enhanced_data_size>());
        pd = pd.subspan(mpa_enhanced_data_size);
    }
    f.private_data = pd;
    return r;
}

size_t encode_mpa_frame(const MpaFrame& frame, std::span<uint8_t> out)
{
    const size_t pd_length = frame.pd_length();
    if (pd_length > mpa_max_pd_length || out.size() < frame.wire_size()) return 0;
    if (frame.enhanced &&
        (frame.enhanced->ird > mpa_ird_ord_max || frame.enhanced->ord > mpa_ird_ord_max))
        return 0;

    const MpaKey& key = frame.type == MpaFrameType::request ? mpa_request_key
                        : frame.type == MpaFrameType::reply ? mpa_reply_key
                                                            : mpa_rtr_key;
    std::copy(key.begin(), key.end(), out.begin());
    out[flags_offset] = static_cast<uint8_t>((frame.marker ? mpa_flag::m : 0) |
                                             (frame.crc ? mpa_flag::c : 0) |
                                             (frame.reject ? mpa_flag::r : 0) |
                                             (frame.s || frame.enhanced ? mpa_flag::s : 0) |
                                             (frame.res & mpa_flag::res));
    out[rev_offset] = frame.rev;
    out[pd_length_offset] = static_cast<uint8_t>(pd_length >> 8);
    out[pd_length_offset + 1] = static_cast<uint8_t>(pd_length);
    size_t pos = mpa_frame_header_size;
    if (frame.enhanced) {
        encode_mpa_enhanced_data(*frame.enhanced, out.subspan(pos).first<mpa_enhanced_data_size>());
        pos += mpa_enhanced_data_size;
    }
    if (!frame.private_data.empty())
        std::memcpy(out.data() + pos, frame.private_data.data(), frame.private_data.size());
    return pos + frame.private_data.size();
}

}  // namespace iwemu::wire
