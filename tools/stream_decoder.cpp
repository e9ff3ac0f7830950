// `iwemu decode` engine: MPA startup frames via wire::parse_mpa_frame, then
// the Full Operation phase through the same streaming wire::FpduReceiver the
// emulator uses, with DDP/RDMAP headers decoded and validated by the wire
// codecs.  Markers are stripped by the receiver; their FPDUPTR values are
// read back from the input for display.
#include "tools/stream_decoder.h"

#include <algorithm>
#include <array>
#include <string>

#include "emulator/wire/fpdu_receiver.h"
#include "emulator/wire/mpa_frame.h"
#include "emulator/wire/start_key.h"
#include "emulator/wire/rdmap_message.h"
#include "tools/segment_format.h"

namespace iwemu::tools {
namespace {

void put_line(std::FILE* out, const std::string& line)
{
    std::fputs(line.c_str(), out);
    std::fputc('\n', out);
}

void put_terminate(std::FILE* out, wire::TerminateCode code)
{
    put_line(out, "terminate: " + format_terminate_code(code));
}

// Receives the FpduReceiver callbacks for one stream and prints each FPDU.
class FpduPrinter {
public:
    FpduPrinter(std::span<const uint8_t> stream, size_t phase_start, const DecodeOptions& options, bool crc,
                const wire::FpduReceiver& rx, std::FILE* out)
        : stream_(stream), phase_start_(phase_start), options_(options), crc_(crc), rx_(rx), out_(out),
          fpdu_start_(options.offset), last_end_(options.offset)
    {
    }

    void on_segment_header(std::span<const uint8_t> ddp_header, uint16_t ulpdu_length)
    {
        if (stopped_)
            return;
        header_ = wire::decode_ddp_header(ddp_header);
        ulpdu_length_ = ulpdu_length;
        if (header_)
            rejected_ = wire::validate_rdmap_segment(*header_, ulpdu_length, {.rfc7306 = options_.rfc7306,
                                                                           .version = options_.version.value_or(1)});
    }

    void on_payload(std::span<const uint8_t> fragment, uint32_t payload_offset)
    {
        if (stopped_)
            return;
        if (payload_offset < body_.size()) {
            const size_t n = std::min(fragment.size(), body_.size() - payload_offset);
            std::copy_n(fragment.data(), n, body_.data() + payload_offset);
            body_got_ = std::max<size_t>(body_got_, payload_offset + n);
        }
    }

    void on_segment_end()
    {
        if (stopped_)
            return;
        const uint32_t end = rx_.stream_offset();
        print_fpdu(crc_ ? "good" : "off", end);
        ++fpdus_;
        if (rejected_) {
            put_line(out_, strprintf("error: at=%zu seq=%u: %s segment rejected (%s)", stream_index(fpdu_start_),
                                     fpdu_start_, header_->control.tagged ? "tagged" : "untagged",
                                     "DDP/RDMAP header check"));
            put_terminate(out_, *rejected_);
            stopped_ = true;
            failed_ = true;
        }
        fpdu_start_ = last_end_ = end;
        reset_segment();
    }

    void on_error(const wire::FpduRxError& error)
    {
        if (stopped_)
            return;
        const bool crc_error = error.code == wire::TerminateCode{wire::TerminateLayer::llp, wire::etype::llp_mpa,
                                                                  wire::ecode::mpa_crc_error};
        const std::span<const uint8_t> partial = rx_.ddp_header();
        if (!header_ && !partial.empty() && partial.size() == wire::ddp_header_size(partial[0])) {
            // The receiver stopped right after the header (DDP version check).
            header_ = wire::decode_ddp_header(partial);
            ulpdu_length_ = rx_.ulpdu_length();
        }
        if (header_) {
            // The receiver reports a marker disagreement only for an FPDU
            // whose CRC was good (RFC 5044 §8, MPA-031).
            constexpr wire::TerminateCode marker_disagree{wire::TerminateLayer::llp, wire::etype::llp_mpa,
                                                          wire::ecode::mpa_marker_and_ulpdu_length_disagree};
            const bool marker_error = error.code == marker_disagree;
            const std::string crc =
                crc_error      ? strprintf("bad (received 0x%08x, computed 0x%08x)", rx_.last_crc_received(),
                                           rx_.last_crc_computed())
                : !crc_        ? std::string("off")
                : marker_error ? std::string("good")
                               : std::string("unchecked");
            print_fpdu(crc, rx_.stream_offset());
        }
        put_line(out_, strprintf("error: at=%zu seq=%u: %.*s", stream_index(fpdu_start_), fpdu_start_,
                                 static_cast<int>(error.what.size()), error.what.data()));
        put_terminate(out_, error.code);
        stopped_ = true;
        failed_ = true;
    }

    // After the last octet: a partial FPDU is a truncated stream.
    void finish()
    {
        if (stopped_ || rx_.failed() || rx_.stream_offset() == last_end_)
            return;
        put_line(out_, strprintf("error: at=%zu seq=%u: stream ends inside an FPDU (%u of its octets present, "
                                 "receiver state %.*s)",
                                 stream_index(fpdu_start_), fpdu_start_, rx_.stream_offset() - fpdu_start_,
                                 static_cast<int>(wire::to_string(rx_.state()).size()),
                                 wire::to_string(rx_.state()).data()));
        put_terminate(out_, {wire::TerminateLayer::llp, wire::etype::llp_mpa, wire::ecode::mpa_tcp_connection_lost});
        failed_ = true;
    }

    bool failed() const { return failed_; }
    size_t fpdus() const { return fpdus_; }

private:
    size_t stream_index(uint32_t seq) const { return phase_start_ + static_cast<uint32_t>(seq - options_.offset); }

    // Markers of this FPDU: every SeqStart + 512·k inside [fpdu_start_, end).
    std::string markers(uint32_t end) const
    {
        if (!options_.markers)
            return {};
        std::string s;
        for (uint32_t d = wire::mpa_octets_to_marker(fpdu_start_); d < static_cast<uint32_t>(end - fpdu_start_);
             d += wire::mpa_marker_interval) {
            const size_t at = stream_index(fpdu_start_ + d);
            if (at + wire::mpa_marker_size > stream_.size())
                break;
            const unsigned fpduptr = stream_[at + 2] << 8 | stream_[at + 3];
            s += strprintf("%s0x%x:fpduptr=%u", s.empty() ? "" : ",", fpdu_start_ + d, fpduptr);
        }
        return s.empty() ? " markers=none" : " markers=" + s;
    }

    void print_fpdu(const std::string& crc, uint32_t end)
    {
        std::string line = strprintf("fpdu at=%zu seq=%u ulpdu_length=%u crc=%s", stream_index(fpdu_start_),
                                     fpdu_start_, ulpdu_length_, crc.c_str());
        line += markers(end);
        if (header_) {
            const size_t body_length = ulpdu_length_ >= header_->size() ? ulpdu_length_ - header_->size() : 0;
            line += " ddp " + format_ddp_header(*header_) + " rdmap " +
                    format_rdmap(*header_, std::span<const uint8_t>(body_.data(), body_got_), body_length);
        }
        put_line(out_, line);
    }

    void reset_segment()
    {
        header_.reset();
        rejected_.reset();
        ulpdu_length_ = 0;
        body_got_ = 0;
    }

    std::span<const uint8_t> stream_;
    size_t phase_start_;  // index in stream_ of the first FPDU-phase octet
    const DecodeOptions& options_;
    bool crc_;
    const wire::FpduReceiver& rx_;
    std::FILE* out_;

    uint32_t fpdu_start_;  // stream offset (from SeqStart) of the current FPDU
    uint32_t last_end_;    // stream offset after the last complete FPDU
    std::optional<wire::DdpHeader> header_;
    std::optional<wire::TerminateCode> rejected_;
    uint16_t ulpdu_length_ = 0;
    // RDMAP header octets after the DDP header (largest: Terminate 52, Atomic Request 52).
    std::array<uint8_t, 64> body_{};
    size_t body_got_ = 0;
    size_t fpdus_ = 0;
    bool stopped_ = false;
    bool failed_ = false;
};

const char* on_off(bool b) { return b ? "on" : "off"; }

}  // namespace

int decode_stream(std::span<const uint8_t> stream, const DecodeOptions& options, std::FILE* out)
{
    size_t pos = 0;
    size_t frames = 0;
    bool crc = options.crc.value_or(true);
    DecodeOptions eff = options;  // with what the startup frame implies
    eff.version = options.version.value_or(1);

    if (options.start == StreamStart::mpa &&
        wire::classify_startup(stream.first(std::min<size_t>(stream.size(), 5))) == wire::StartupForm::start_key) {
        // draft-03 (seed 000 §8.1.1): a Start Key, then version-0 FPDUs.
        const wire::StartKeyParseResult k = wire::parse_start_key(stream, true);
        if (k.status != wire::StartKeyParseStatus::complete) {
            const auto what = wire::to_string(k.status);
            put_line(out, strprintf("error: at=0: draft-03 Start Key: %.*s", static_cast<int>(what.size()), what.data()));
            if (auto code = wire::terminate_code(k.status))
                put_terminate(out, *code);
            return decode_malformed;
        }
        // A variant's zero Rev octet / PD_Length cannot be told from the
        // zero marker that opens the first FPDU by its octets: the length
        // whose FPDUs then decode wins (none: the 16-octet layout).
        size_t trailer = 0;
        if (const size_t most = wire::start_key_trailer_size(stream.subspan(wire::start_key_size)); most != 0) {
            if (std::FILE* sink = std::fopen("/dev/null", "w")) {
                DecodeOptions trial = options;
                trial.start = StreamStart::fpdu;
                trial.crc = options.crc.value_or(true);
                trial.version = options.version.value_or(0);
                trial.markers = options.markers_known ? options.markers : true;
                trial.markers_known = true;
                for (const size_t t : {size_t{0}, size_t{1}, size_t{3}}) {
                    if (t > most)
                        break;
                    if (decode_stream(stream.subspan(wire::start_key_size + t), trial, sink) == decode_ok) {
                        trailer = t;
                        break;
                    }
                }
                std::fclose(sink);
            }
        }
        put_line(out, strprintf("startkey at=0 length=%zu key=\"MPA ident frame\" m=%d c=%d res=%u rev=0%s",
                                wire::start_key_size + trailer, k.key.marker, k.key.crc, k.key.res,
                                trailer ? " (variant: zero Rev octet / PD_Length after the key)" : ""));
        ++frames;
        pos = wire::start_key_size + trailer;
        crc = options.crc.value_or(true);  // either side's C=1: this direction cannot see the other key
        if (!options.version)
            eff.version = 0;
        if (!options.markers_known)
            eff.markers = true;
    } else if (options.start == StreamStart::mpa) {
        const wire::MpaParseResult first = wire::parse_mpa_frame(stream, std::nullopt, true, /*accept_rev0=*/true);
        if (first.status != wire::MpaParseStatus::complete) {
            const auto what = wire::to_string(first.status);
            put_line(out,
                     strprintf("error: at=0: MPA startup frame: %.*s", static_cast<int>(what.size()), what.data()));
            if (auto code = wire::terminate_code(first.status))
                put_terminate(out, *code);
            return decode_malformed;
        }
        put_line(out, strprintf("mpa at=0 length=%zu ", first.frame_size) + format_mpa_frame(first.frame));
        ++frames;
        pos = first.frame_size;
        crc = options.crc.value_or(first.frame.crc);
        if (first.frame.rev == 0 && !options.version) {  // RFC 5044 Appendix C
            eff.version = 0;
            eff.markers = true;
            crc = options.crc.value_or(true);
        }

        if (first.frame.type == wire::MpaFrameType::reply && first.frame.reject) {
            if (pos == stream.size()) {
                put_line(out, "end: connection rejected (R=1), no Full Operation");
                return decode_ok;
            }
            put_line(out, strprintf("error: at=%zu: %zu octets after a rejecting Reply", pos, stream.size() - pos));
            return decode_malformed;
        }
        // Seed-002 mode: an Rtr frame may follow the Request (decision 3:
        // SeqStart comes after it).
        if (first.frame.type == wire::MpaFrameType::request && stream.size() - pos >= wire::mpa_key_size &&
            wire::mpa_frame_type_of_key(stream.subspan(pos, wire::mpa_key_size)) == wire::MpaFrameType::rtr) {
            const wire::MpaParseResult rtr = wire::parse_mpa_frame(stream.subspan(pos), wire::MpaFrameType::rtr, true);
            if (rtr.status != wire::MpaParseStatus::complete) {
                const auto what = wire::to_string(rtr.status);
                put_line(out, strprintf("error: at=%zu: seed-002 Rtr frame: %.*s", pos, static_cast<int>(what.size()),
                                        what.data()));
                if (auto code = wire::terminate_code(rtr.status))
                    put_terminate(out, *code);
                return decode_malformed;
            }
            put_line(out, strprintf("mpa at=%zu length=%zu ", pos, rtr.frame_size) + format_mpa_frame(rtr.frame));
            ++frames;
            pos += rtr.frame_size;
        }
    }

    put_line(out, strprintf("full-operation at=%zu seq=%u crc=%s markers=%s rfc7306=%s%s", pos, options.offset,
                            on_off(crc), on_off(eff.markers), on_off(options.rfc7306),
                            *eff.version == 0 ? " version=0" : ""));

    wire::FpduReceiverOptions rx_options;
    rx_options.crc = crc;
    rx_options.markers = eff.markers;
    rx_options.ddp_version = *eff.version;
    rx_options.initial_stream_offset = options.offset;
    wire::FpduReceiver rx(rx_options);
    FpduPrinter printer(stream, pos, eff, crc, rx, out);
    rx.feed(stream.subspan(pos), printer);
    printer.finish();
    if (printer.failed())
        return decode_malformed;
    put_line(out, strprintf("end: %zu startup frame(s), %zu fpdu(s), %zu octets decoded", frames, printer.fpdus(),
                            stream.size()));
    return decode_ok;
}

}  // namespace iwemu::tools
