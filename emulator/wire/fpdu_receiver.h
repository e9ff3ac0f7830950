// Streaming FPDU receiver for one direction of an MPA connection in Full
// Operation (RFC 5044 §4-§6, §8).  An explicit state machine in the style of
// SPDK's NVMe/TCP PDU receive path:
//
//   ulpdu_length ─► ddp_header ─► payload ─► pad ─► crc ─► ulpdu_length …
//                                 (skipped when empty)
//   any state ─► error (sticky: no further FPDU is delivered, MPA-053)
//
//   state         leaves after                 to                 event
//   ulpdu_length  2 octets, length valid       ddp_header         –
//   ddp_header    14 (T=1) / 18 (T=0), DV = 1  payload|pad|crc    segment_header
//   payload       ULPDU_Length − header        pad|crc            –
//   pad           (4 − (2 + L) mod 4) mod 4    crc                –
//   crc           4 octets, CRC (and markers)  ulpdu_length       segment_end
//                 good
//   marker        4 octets (stream offset      back to the state  –
//                 ≡ 0 mod 512)                 it interrupted
//   any           a check fails                error              error
//
// With markers on, a 4-octet marker interrupts whichever state is current
// at every stream offset ≡ 0 (mod 512); it is stripped, checked (FPDUPTR vs
// the ULPDU_Length chain, MPA-028/031) and covered by the CRC.
//
// Two ways to drive it, one machine:
//  * push: feed(chunk, visitor) with chunks of any size; payload is reported
//    as spans INTO the chunk (no copy), headers from a small internal buffer.
//  * pull: next_need() says what comes next and how many octets at most
//    before the next state change or marker; the caller reads exactly that
//    (payload straight into user memory with readv) and hands the octets to
//    consume(), which only counts and CRCs payload.
//  The two can be mixed at any octet boundary: e.g. feed() a recv()'d
//  staging chunk (headers, small payloads), then readv() the rest of a large
//  payload into user memory and consume() it, then feed() again.
//
// Checks at this layer:
//  * ULPDU_Length smaller than the DDP header it announces, or larger than
//    options.max_ulpdu_length: LLP/MPA/0x03 (what Linux siw sends for a short
//    mpa_len, "FPDU start"; MPA-056 / decision 7).
//  * DV != 1: DDP 1/1/04 (tagged) or 1/2/06 (untagged), like siw.
//  * CRC mismatch (when options.crc): LLP/MPA/0x02.  The CRC field is always
//    present on the wire; with CRC off its value is ignored (MPA-005).
//  * Marker FPDUPTR disagreeing with the ULPDU_Length chain: LLP/MPA/0x03,
//    reported when the FPDU ends, and only if its CRC was good (MPA-031);
//    a bad CRC wins (0x02).
#pragma once

#include <algorithm>
#include <array>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string_view>

#include "emulator/wire/crc32c.h"
#include "emulator/wire/fpdu.h"
#include "emulator/wire/terminate_codes.h"

namespace iwemu::wire {

struct FpduReceiverOptions {
    bool crc = true;      // check the CRC (negotiated C bit)
    bool markers = false; // peer inserts markers toward us (we sent M=1)
    // Stream offset (relative to SeqStart of this direction, mod 2^32) of the
    // first octet this receiver will see: 0 for a fresh connection.
    uint32_t initial_stream_offset = 0;
    // Largest ULPDU_Length accepted (local receive limit, MPA-006/056).  The
    // default accepts anything the field can carry: be tolerant of peers.
    uint32_t max_ulpdu_length = mpa_ulpdu_length_max;
    // DDP version expected in every FPDU: 1, or 0 on a connection switched to
    // RDMA Consortium behaviour (RFC 5044 Appendix C); anything else is
    // "Invalid DDP version".
    uint8_t ddp_version = ::iwemu::wire::ddp_version;
};

enum class FpduRxState : uint8_t {
    ulpdu_length,  // 2 octets
    ddp_header,    // 14 (T = 1) or 18 (T = 0) octets
    payload,       // ULPDU_Length − DDP header octets
    pad,           // 0..3 octets
    crc,           // 4 octets
    marker,        // 4 octets (interrupts any of the above)
    error,         // sticky
};

std::string_view to_string(FpduRxState state);

// What the machine expects next (pull mode).
struct FpduRxNeed {
    FpduRxState state;
    uint32_t max_octets;  // octets of `state` before the next change or marker; 0 in error
};

enum class FpduRxEvent : uint8_t {
    none,            // octets absorbed, nothing to report
    segment_header,  // DDP header complete: ddp_header(), ulpdu_length()
    segment_end,     // FPDU complete and valid (CRC checked when on)
    error,           // error(): Terminate code and description; sticky
};

struct FpduRxError {
    TerminateCode code{TerminateLayer::llp, etype::llp_mpa, 0};
    std::string_view what;  // static text
};

// Visitor for feed():
//   void on_segment_header(std::span<const uint8_t> ddp_header, uint16_t ulpdu_length);
//   void on_payload(std::span<const uint8_t> fragment, uint32_t payload_offset);
//   void on_segment_end();
//   void on_error(const FpduRxError& error);
// payload_offset counts DDP payload octets of this segment (0 = first octet
// after the DDP header; the RDMAP header of Read Request/Terminate/... is
// payload at this layer).  Fragments point into the fed chunk.
template <class V>
concept FpduRxVisitor = requires(V v, std::span<const uint8_t> s, uint16_t l, uint32_t o,
                                 const FpduRxError& e) {
    v.on_segment_header(s, l);
    v.on_payload(s, o);
    v.on_segment_end();
    v.on_error(e);
};

class FpduReceiver {
public:
    struct ConsumeResult {
        size_t consumed;
        FpduRxEvent event;
    };

    explicit FpduReceiver(const FpduReceiverOptions& options = {});

    // Start over (new connection / stream), as if freshly constructed.
    void reset(const FpduReceiverOptions& options);

    // ---- pull mode -------------------------------------------------------
    FpduRxNeed next_need() const;

    // Absorb up to next_need().max_octets octets of the current state (more
    // are left unconsumed).  For payload the octets are only counted and
    // CRC'd (the caller already placed them).  `consumed` < bytes.size()
    // only when a state boundary or an error was reached.
    ConsumeResult consume(std::span<const uint8_t> bytes);

    // Pull mode for framing octets (anything but payload), as consume() but
    // through the next event in one step when it can: ULPDU_Length and DDP
    // header (segment_header), or PAD and CRC (segment_end), all in `bytes`
    // with no marker among them.  Otherwise exactly consume().  `bytes` may
    // run past the framing: payload is never absorbed here.  A small FPDU
    // read whole takes three steps instead of six (untagged header).
    ConsumeResult consume_framing(std::span<const uint8_t> bytes);

    // ---- push mode -------------------------------------------------------
    // Drive the machine over `chunk`, reporting to `visitor`.  Returns the
    // octets consumed: chunk.size(), or fewer if an error stopped it.
    template <FpduRxVisitor V>
    size_t feed(std::span<const uint8_t> chunk, V& visitor);

    // ---- introspection ---------------------------------------------------
    FpduRxState state() const { return state_; }
    bool failed() const { return state_ == FpduRxState::error; }
    const FpduRxError& error() const { return error_; }
    // DDP header of the current segment (complete after segment_header;
    // partial before).  Valid until the next segment starts.
    std::span<const uint8_t> ddp_header() const { return {header_.data(), header_got_}; }
    uint16_t ulpdu_length() const { return ulpdu_length_; }
    uint32_t payload_received() const { return payload_got_; }
    uint32_t payload_length() const { return payload_len_; }
    // Stream offset (from SeqStart, mod 2^32) of the next octet expected.
    uint32_t stream_offset() const { return stream_offset_; }
    uint64_t segments_completed() const { return segments_; }
    // CRC value received in / computed for the last FPDU (diagnostics, tools).
    uint32_t last_crc_received() const { return crc_received_; }
    uint32_t last_crc_computed() const { return crc_computed_; }

private:
    bool marker_pending() const
    {
        return options_.markers &&
               (marker_got_ > 0 || mpa_octets_to_marker(stream_offset_) == 0);
    }
    uint32_t state_remaining() const;
    FpduRxEvent fail(TerminateCode code, std::string_view what);
    FpduRxEvent absorb_marker(std::span<const uint8_t> bytes);
    FpduRxEvent absorb_ulpdu_length(std::span<const uint8_t> bytes);
    FpduRxEvent absorb_ddp_header(std::span<const uint8_t> bytes);
    FpduRxEvent absorb_payload(std::span<const uint8_t> bytes);
    FpduRxEvent absorb_pad(std::span<const uint8_t> bytes);
    FpduRxEvent absorb_crc(std::span<const uint8_t> bytes);
    void crc_update(std::span<const uint8_t> bytes)
    {
        if (options_.crc) crc_.update(bytes);
    }
    void enter_trailer();
    void begin_fpdu();
    FpduRxEvent finish_fpdu();
    // feed() and consume_framing() fast paths, taken when a whole ULPDU_Length + DDP header (or a
    // whole PAD + CRC) sits in the chunk with no marker among them: one CRC
    // call and no per-state dispatch.  They return 0 when not applicable
    // (the general path then handles the octets, errors included).
    size_t fast_header(std::span<const uint8_t> rest);
    // The whole FPDU (markers included) is in the chunk: one CRC call over
    // all of it, markers checked in passing.  On success the FPDU is absorbed
    // up to (not including) finish_fpdu(); its payload starts at
    // rest[fast_payload_at_], stream offset fast_payload_offset_.
    size_t fast_whole_fpdu(std::span<const uint8_t> rest);
    template <FpduRxVisitor V>
    void deliver_whole_payload(std::span<const uint8_t> rest, V& visitor);
    size_t fast_trailer(std::span<const uint8_t> rest, FpduRxEvent& event);

    FpduReceiverOptions options_;
    FpduRxState state_ = FpduRxState::ulpdu_length;
    uint8_t marker_got_ = 0;       // > 0: inside a marker that interrupts state_
    std::array<uint8_t, mpa_marker_size> marker_{};

    uint32_t stream_offset_ = 0;
    uint32_t fpdu_offset_ = 0;     // stream offset of this FPDU's ULPDU_Length
    bool marker_mismatch_ = false; // deferred MPA error 3

    std::array<uint8_t, mpa_ulpdu_length_size> length_buf_{};
    uint8_t length_got_ = 0;
    uint16_t ulpdu_length_ = 0;

    std::array<uint8_t, ddp_untagged_header_size> header_{};
    uint8_t header_got_ = 0;
    uint8_t header_len_ = ddp_tagged_header_size;  // known after the first octet

    uint32_t payload_len_ = 0;
    uint32_t payload_got_ = 0;
    uint8_t pad_len_ = 0;
    uint8_t pad_got_ = 0;

    std::array<uint8_t, mpa_crc_size> crc_buf_{};
    uint8_t crc_got_ = 0;
    Crc32c crc_;
    uint32_t crc_received_ = 0;
    uint32_t crc_computed_ = 0;

    size_t fast_payload_at_ = 0;
    uint32_t fast_payload_offset_ = 0;

    uint64_t segments_ = 0;
    FpduRxError error_{};
};

template <FpduRxVisitor V>
void FpduReceiver::deliver_whole_payload(std::span<const uint8_t> rest, V& visitor)
{
    size_t at = fast_payload_at_;
    uint32_t offset = fast_payload_offset_;
    for (uint32_t done = 0; done < payload_len_;) {
        if (options_.markers && mpa_octets_to_marker(offset) == 0) {
            at += mpa_marker_size;
            offset += mpa_marker_size;
        }
        uint32_t run = payload_len_ - done;
        if (options_.markers) run = std::min(run, mpa_octets_to_marker(offset));
        visitor.on_payload(rest.subspan(at, run), done);
        at += run;
        offset += run;
        done += run;
    }
}

template <FpduRxVisitor V>
size_t FpduReceiver::feed(std::span<const uint8_t> chunk, V& visitor)
{
    size_t pos = 0;
    while (pos < chunk.size()) {
        const auto rest = chunk.subspan(pos);
        FpduRxEvent event = FpduRxEvent::none;
        switch (state_) {
        case FpduRxState::error:
            return pos;
        case FpduRxState::payload:
            if (!marker_pending()) {
                // Hot path: hand the caller's octets straight up, CRC them once.
                uint32_t n = payload_len_ - payload_got_;
                if (options_.markers) n = std::min(n, mpa_octets_to_marker(stream_offset_));
                const auto fragment = rest.first(std::min<size_t>(rest.size(), n));
                visitor.on_payload(fragment, payload_got_);
                absorb_payload(fragment);
                pos += fragment.size();
                continue;
            }
            break;
        case FpduRxState::ulpdu_length:
            if (const size_t n = fast_whole_fpdu(rest)) {
                pos += n;
                visitor.on_segment_header(ddp_header(), ulpdu_length_);
                deliver_whole_payload(rest, visitor);
                if (finish_fpdu() == FpduRxEvent::error) {
                    visitor.on_error(error_);
                    return pos;
                }
                visitor.on_segment_end();
                continue;
            }
            if (const size_t n = fast_header(rest)) {
                pos += n;
                visitor.on_segment_header(ddp_header(), ulpdu_length_);
                continue;
            }
            break;
        case FpduRxState::pad:
        case FpduRxState::crc:
            if (const size_t n = fast_trailer(rest, event)) {
                pos += n;
                if (event == FpduRxEvent::error) {
                    visitor.on_error(error_);
                    return pos;
                }
                visitor.on_segment_end();
                continue;
            }
            break;
        default:
            break;
        }
        const ConsumeResult r = consume(rest);
        pos += r.consumed;
        switch (r.event) {
        case FpduRxEvent::none:
            break;
        case FpduRxEvent::segment_header:
            visitor.on_segment_header(ddp_header(), ulpdu_length_);
            break;
        case FpduRxEvent::segment_end:
            visitor.on_segment_end();
            break;
        case FpduRxEvent::error:
            visitor.on_error(error_);
            return pos;
        }
    }
    return pos;
}

}  // namespace iwemu::wire
