// Streaming FPDU receive state machine (RFC 5044 §4-§6, §8).  Every octet
// passes through exactly one absorb_*() step, chosen by next_need(); payload
// octets are only counted and CRC'd, never copied.
#include "emulator/wire/fpdu_receiver.h"

#include <algorithm>
#include <cstring>

namespace iwemu::wire {
namespace {

constexpr TerminateCode mpa_code(uint8_t ecode) { return {TerminateLayer::llp, etype::llp_mpa, ecode}; }

// Header-sized copies (<= 18 octets): a loop beats a memcpy call here.
inline void copy_small(uint8_t* dst, std::span<const uint8_t> src)
{
    for (size_t i = 0; i < src.size(); ++i) dst[i] = src[i];
}

}  // namespace

std::string_view to_string(FpduRxState state)
{
    switch (state) {
    case FpduRxState::ulpdu_length: return "ulpdu_length";
    case FpduRxState::ddp_header: return "ddp_header";
    case FpduRxState::payload: return "payload";
    case FpduRxState::pad: return "pad";
    case FpduRxState::crc: return "crc";
    case FpduRxState::marker: return "marker";
    case FpduRxState::error: return "error";
    }
    return "?";
}

FpduReceiver::FpduReceiver(const FpduReceiverOptions& options) { reset(options); }

void FpduReceiver::reset(const FpduReceiverOptions& options)
{
    options_ = options;
    marker_got_ = 0;
    stream_offset_ = options.initial_stream_offset;
    segments_ = 0;
    crc_received_ = 0;
    crc_computed_ = 0;
    error_ = {};
    begin_fpdu();
}

void FpduReceiver::begin_fpdu()
{
    state_ = FpduRxState::ulpdu_length;
    fpdu_offset_ = stream_offset_;
    marker_mismatch_ = false;
    length_got_ = 0;
    ulpdu_length_ = 0;
    header_got_ = 0;
    header_len_ = ddp_tagged_header_size;
    payload_len_ = 0;
    payload_got_ = 0;
    pad_len_ = 0;
    pad_got_ = 0;
    crc_got_ = 0;
    crc_.reset();
}

uint32_t FpduReceiver::state_remaining() const
{
    switch (state_) {
    case FpduRxState::ulpdu_length: return mpa_ulpdu_length_size - length_got_;
    case FpduRxState::ddp_header: return header_len_ - header_got_;
    case FpduRxState::payload: return payload_len_ - payload_got_;
    case FpduRxState::pad: return pad_len_ - pad_got_;
    case FpduRxState::crc: return mpa_crc_size - crc_got_;
    case FpduRxState::marker:
    case FpduRxState::error: break;
    }
    return 0;
}

FpduRxNeed FpduReceiver::next_need() const
{
    if (state_ == FpduRxState::error) return {FpduRxState::error, 0};
    if (marker_pending()) return {FpduRxState::marker, static_cast<uint32_t>(mpa_marker_size - marker_got_)};
    uint32_t n = state_remaining();
    if (options_.markers) n = std::min(n, mpa_octets_to_marker(stream_offset_));
    return {state_, n};
}

FpduRxEvent FpduReceiver::fail(TerminateCode code, std::string_view what)
{
    state_ = FpduRxState::error;
    error_ = {code, what};
    return FpduRxEvent::error;
}

FpduReceiver::ConsumeResult FpduReceiver::consume(std::span<const uint8_t> bytes)
{
    if (state_ == FpduRxState::error) return {0, FpduRxEvent::error};
    const FpduRxNeed need = next_need();
    const size_t n = std::min<size_t>(bytes.size(), need.max_octets);
    if (n == 0) return {0, FpduRxEvent::none};
    const auto b = bytes.first(n);
    FpduRxEvent event = FpduRxEvent::none;
    switch (need.state) {
    case FpduRxState::marker: event = absorb_marker(b); break;
    case FpduRxState::ulpdu_length: event = absorb_ulpdu_length(b); break;
    case FpduRxState::ddp_header: event = absorb_ddp_header(b); break;
    case FpduRxState::payload: event = absorb_payload(b); break;
    case FpduRxState::pad: event = absorb_pad(b); break;
    case FpduRxState::crc: event = absorb_crc(b); break;
    case FpduRxState::error: return {0, FpduRxEvent::error};
    }
    return {n, event};
}

FpduReceiver::ConsumeResult FpduReceiver::consume_framing(std::span<const uint8_t> bytes)
{
    switch (state_) {
    case FpduRxState::ulpdu_length:
        if (const size_t n = fast_header(bytes)) return {n, FpduRxEvent::segment_header};
        break;
    case FpduRxState::pad:
    case FpduRxState::crc: {
        FpduRxEvent event = FpduRxEvent::none;
        if (const size_t n = fast_trailer(bytes, event)) return {n, event};
        break;
    }
    default:
        break;
    }
    return consume(bytes);
}

FpduRxEvent FpduReceiver::absorb_marker(std::span<const uint8_t> b)
{
    // A marker belongs to the FPDU it interrupts, or opens the next one
    // (state ulpdu_length, nothing of it read yet); either way it is covered
    // by that FPDU's CRC (RFC 5044 §4.3, §4.4).
    const uint32_t marker_offset = stream_offset_ - marker_got_;
    copy_small(&marker_[marker_got_], b);
    marker_got_ = static_cast<uint8_t>(marker_got_ + b.size());
    stream_offset_ += static_cast<uint32_t>(b.size());
    crc_update(b);
    if (marker_got_ < mpa_marker_size) return FpduRxEvent::none;
    marker_got_ = 0;

    const bool opening = state_ == FpduRxState::ulpdu_length && length_got_ == 0;
    if (opening) fpdu_offset_ = stream_offset_;  // ULPDU_Length follows the marker
    const uint32_t expected = opening ? 0 : marker_offset - fpdu_offset_;
    // Reserved octets ignored; FPDUPTR low two bits treated as 0 (MPA-030).
    const uint32_t fpduptr = (uint32_t{marker_[2]} << 8 | marker_[3]) & 0xFFFCu;
    // Reported once the FPDU's CRC is known to be good (MPA-031).
    if (fpduptr != expected) marker_mismatch_ = true;
    return FpduRxEvent::none;
}

FpduRxEvent FpduReceiver::absorb_ulpdu_length(std::span<const uint8_t> b)
{
    if (length_got_ == 0 && marker_got_ == 0) fpdu_offset_ = stream_offset_;
    copy_small(&length_buf_[length_got_], b);
    length_got_ = static_cast<uint8_t>(length_got_ + b.size());
    stream_offset_ += static_cast<uint32_t>(b.size());
    crc_update(b);
    if (length_got_ < mpa_ulpdu_length_size) return FpduRxEvent::none;

    ulpdu_length_ = static_cast<uint16_t>(length_buf_[0] << 8 | length_buf_[1]);
    // An FPDU that cannot be one is fatal for this half connection (MPA-056);
    // Linux siw reports a short mpa_len as LLP/MPA/0x03.
    if (ulpdu_length_ < ddp_tagged_header_size)
        return fail(mpa_code(ecode::mpa_marker_and_ulpdu_length_disagree),
                    "ULPDU_Length too small for a DDP header");
    if (ulpdu_length_ > options_.max_ulpdu_length)
        return fail(mpa_code(ecode::mpa_marker_and_ulpdu_length_disagree),
                    "ULPDU_Length exceeds the receive limit");
    pad_len_ = static_cast<uint8_t>(mpa_pad_length(ulpdu_length_));
    state_ = FpduRxState::ddp_header;
    return FpduRxEvent::none;
}

FpduRxEvent FpduReceiver::absorb_ddp_header(std::span<const uint8_t> b)
{
    if (header_got_ == 0) {
        header_len_ = static_cast<uint8_t>(ddp_header_size(b[0]));
        if (ulpdu_length_ < header_len_)
            return fail(mpa_code(ecode::mpa_marker_and_ulpdu_length_disagree),
                        "ULPDU_Length too small for the untagged DDP header");
    }
    copy_small(&header_[header_got_], b);
    header_got_ = static_cast<uint8_t>(header_got_ + b.size());
    stream_offset_ += static_cast<uint32_t>(b.size());
    crc_update(b);
    if (header_got_ < header_len_) return FpduRxEvent::none;

    // RFC 5041 §7.2: DV other than 1 is an Invalid DDP version error.
    if ((header_[0] & ddp_control_dv_mask) != options_.ddp_version) {
        if (header_[0] & ddp_control_t)
            return fail({TerminateLayer::ddp, etype::ddp_tagged_buffer,
                         ecode::ddp_tagged_invalid_ddp_version},
                        "invalid DDP version (tagged)");
        return fail({TerminateLayer::ddp, etype::ddp_untagged_buffer,
                     ecode::ddp_untagged_invalid_ddp_version},
                    "invalid DDP version (untagged)");
    }
    payload_len_ = ulpdu_length_ - header_len_;
    if (payload_len_ > 0)
        state_ = FpduRxState::payload;
    else
        enter_trailer();
    return FpduRxEvent::segment_header;
}

FpduRxEvent FpduReceiver::absorb_payload(std::span<const uint8_t> b)
{
    payload_got_ += static_cast<uint32_t>(b.size());
    stream_offset_ += static_cast<uint32_t>(b.size());
    crc_update(b);
    if (payload_got_ == payload_len_) enter_trailer();
    return FpduRxEvent::none;
}

void FpduReceiver::enter_trailer()
{
    state_ = pad_len_ > 0 ? FpduRxState::pad : FpduRxState::crc;
}

FpduRxEvent FpduReceiver::absorb_pad(std::span<const uint8_t> b)
{
    // PAD content is not checked, only covered by the CRC (MPA-004).
    pad_got_ = static_cast<uint8_t>(pad_got_ + b.size());
    stream_offset_ += static_cast<uint32_t>(b.size());
    crc_update(b);
    if (pad_got_ == pad_len_) state_ = FpduRxState::crc;
    return FpduRxEvent::none;
}

FpduRxEvent FpduReceiver::absorb_crc(std::span<const uint8_t> b)
{
    copy_small(&crc_buf_[crc_got_], b);
    crc_got_ = static_cast<uint8_t>(crc_got_ + b.size());
    stream_offset_ += static_cast<uint32_t>(b.size());
    if (crc_got_ < mpa_crc_size) return FpduRxEvent::none;

    return finish_fpdu();
}

FpduRxEvent FpduReceiver::finish_fpdu()
{
    crc_received_ = load_crc_field(crc_buf_.data());
    crc_computed_ = options_.crc ? crc_.value() : 0;
    // The field is always there; with CRC off its value is ignored (MPA-005).
    if (options_.crc && crc_received_ != crc_computed_)
        return fail(mpa_code(ecode::mpa_crc_error), "MPA CRC error");
    if (marker_mismatch_)
        return fail(mpa_code(ecode::mpa_marker_and_ulpdu_length_disagree),
                    "marker FPDUPTR disagrees with ULPDU_Length");
    ++segments_;
    begin_fpdu();
    return FpduRxEvent::segment_end;
}

size_t FpduReceiver::fast_header(std::span<const uint8_t> rest)
{
    constexpr size_t most = mpa_ulpdu_length_size + ddp_untagged_header_size;
    if (length_got_ != 0 || marker_got_ != 0 || rest.size() < most) return 0;
    if (options_.markers && mpa_octets_to_marker(stream_offset_) < most) return 0;  // 0 = due now
    const uint16_t len = static_cast<uint16_t>(rest[0] << 8 | rest[1]);
    const size_t hlen = ddp_header_size(rest[2]);
    // Anything unusual (errors included) takes the general path.
    if (len < hlen || len > options_.max_ulpdu_length || (rest[2] & ddp_control_dv_mask) != options_.ddp_version)
        return 0;
    const size_t n = mpa_ulpdu_length_size + hlen;
    std::memcpy(header_.data(), rest.data() + mpa_ulpdu_length_size, ddp_untagged_header_size);
    crc_update(rest.first(n));
    fpdu_offset_ = stream_offset_;
    stream_offset_ += static_cast<uint32_t>(n);
    length_got_ = mpa_ulpdu_length_size;
    ulpdu_length_ = len;
    header_len_ = static_cast<uint8_t>(hlen);
    header_got_ = header_len_;
    pad_len_ = static_cast<uint8_t>(mpa_pad_length(len));
    payload_len_ = len - header_len_;
    if (payload_len_ > 0)
        state_ = FpduRxState::payload;
    else
        enter_trailer();
    return n;
}

size_t FpduReceiver::fast_whole_fpdu(std::span<const uint8_t> rest)
{
    if (length_got_ != 0 || marker_got_ != 0) return 0;
    const bool markers = options_.markers;
    uint32_t offset = stream_offset_;
    // Off-grid starts (a stream not 4-aligned to SeqStart) take the general path.
    if (markers && (offset & 3u) != 0) return 0;
    auto fpduptr = [&](size_t at) { return static_cast<uint32_t>(rest[at + 2] << 8 | rest[at + 3]) & 0xFFFCu; };

    size_t at = 0;
    bool mismatch = false;
    if (markers && mpa_octets_to_marker(offset) == 0) {  // case A: opening marker
        if (rest.size() < mpa_marker_size) return 0;
        mismatch = fpduptr(0) != 0;
        at = mpa_marker_size;
        offset += mpa_marker_size;
    }
    if (rest.size() < at + mpa_ulpdu_length_size + 1) return 0;
    const uint16_t len = static_cast<uint16_t>(rest[at] << 8 | rest[at + 1]);
    const size_t n = mpa_fpdu_wire_length(len, markers, stream_offset_);
    if (rest.size() < n) return 0;
    const uint8_t ddp_control = rest[at + mpa_ulpdu_length_size];
    const size_t hlen = ddp_header_size(ddp_control);
    // Anything unusual (errors included) takes the general path.
    if (len < hlen || len > options_.max_ulpdu_length || (ddp_control & ddp_control_dv_mask) != options_.ddp_version)
        return 0;

    // Walk ULPDU and PAD between markers: gather the DDP header, check each
    // FPDUPTR, find the payload.  No per-octet work.
    const uint32_t fpdu_offset = offset;
    at += mpa_ulpdu_length_size;
    offset += mpa_ulpdu_length_size;
    size_t left = len + mpa_pad_length(len);
    size_t header_got = 0;
    bool payload_found = false;
    while (true) {
        if (markers && mpa_octets_to_marker(offset) == 0) {  // case B, or C when left == 0
            mismatch |= fpduptr(at) != offset - fpdu_offset;
            at += mpa_marker_size;
            offset += mpa_marker_size;
        }
        if (left == 0) break;
        size_t run = left;
        if (markers) run = std::min<size_t>(run, mpa_octets_to_marker(offset));
        if (header_got < hlen) {
            run = std::min(run, hlen - header_got);
            copy_small(&header_[header_got], rest.subspan(at, run));
            header_got += run;
        } else if (!payload_found) {
            payload_found = true;
            fast_payload_at_ = at;
            fast_payload_offset_ = offset;
        }
        at += run;
        offset += run;
        left -= run;
    }

    crc_update(rest.first(at));  // everything before the CRC field, markers included
    std::memcpy(crc_buf_.data(), rest.data() + at, mpa_crc_size);
    fpdu_offset_ = fpdu_offset;
    marker_mismatch_ = marker_mismatch_ || mismatch;  // an opening marker may have been read already
    stream_offset_ += static_cast<uint32_t>(n);
    length_got_ = mpa_ulpdu_length_size;
    ulpdu_length_ = len;
    header_len_ = static_cast<uint8_t>(hlen);
    header_got_ = header_len_;
    payload_len_ = len - header_len_;
    payload_got_ = payload_len_;
    pad_len_ = pad_got_ = static_cast<uint8_t>(mpa_pad_length(len));
    crc_got_ = mpa_crc_size;
    state_ = FpduRxState::crc;
    return n;
}

size_t FpduReceiver::fast_trailer(std::span<const uint8_t> rest, FpduRxEvent& event)
{
    const size_t pad_left = pad_len_ - pad_got_;
    const size_t n = pad_left + mpa_crc_size;
    if (crc_got_ != 0 || marker_got_ != 0 || rest.size() < n) return 0;
    if (options_.markers && mpa_octets_to_marker(stream_offset_) < n) return 0;  // case C or due
    crc_update(rest.first(pad_left));
    std::memcpy(crc_buf_.data(), rest.data() + pad_left, mpa_crc_size);
    pad_got_ = pad_len_;
    crc_got_ = mpa_crc_size;
    stream_offset_ += static_cast<uint32_t>(n);
    event = finish_fpdu();
    return n;
}

}  // namespace iwemu::wire
