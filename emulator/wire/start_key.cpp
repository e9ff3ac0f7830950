// draft-03 Start Key codec (seed 000 §8.1.1; layout choice in start_key.h).
#include "emulator/wire/start_key.h"

#include <algorithm>
#include <cstring>

namespace iwemu::wire {

std::string_view to_string(StartKeyParseStatus status)
{
    switch (status) {
    case StartKeyParseStatus::complete: return "complete";
    case StartKeyParseStatus::need_more: return "need more octets";
    case StartKeyParseStatus::bad_key: return "invalid Start Key (draft-03 MPA error 4)";
    case StartKeyParseStatus::bad_revision: return "Start Key Rev is not 0";
    case StartKeyParseStatus::truncated: return "stream ended inside the Start Key";
    }
    return "?";
}

StartKeyParseResult parse_start_key(std::span<const uint8_t> bytes, bool end_of_stream)
{
    StartKeyParseResult r;
    const size_t text = std::min(bytes.size(), start_key_text_size);
    if (text != 0 && std::memcmp(bytes.data(), start_key_text.data(), text) != 0) {
        r.status = StartKeyParseStatus::bad_key;  // §8.1.1 Key: "close the connection if any other value"
        return r;
    }
    if (bytes.size() < start_key_size) {
        r.status = end_of_stream ? StartKeyParseStatus::truncated : StartKeyParseStatus::need_more;
        r.need = end_of_stream ? 0 : start_key_size - bytes.size();
        return r;
    }
    const uint8_t f = bytes[start_key_text_size];
    r.key.marker = (f & start_key_flag::m) != 0;
    r.key.crc = (f & start_key_flag::c) != 0;
    r.key.res = f & start_key_flag::res;  // "not checked on reception"
    r.key.rev = f & start_key_flag::rev;
    r.status = r.key.rev == 0 ? StartKeyParseStatus::complete : StartKeyParseStatus::bad_revision;
    return r;
}

size_t start_key_trailer_size(std::span<const uint8_t> after)
{
    size_t zeros = 0;
    while (zeros < std::min(after.size(), start_key_max_trailer) && after[zeros] == 0)
        ++zeros;
    return zeros >= 3 ? 3 : (zeros >= 1 ? 1 : 0);
}

size_t encode_start_key(const StartKey& key, std::span<uint8_t> out)
{
    if (out.size() < start_key_size)
        return 0;
    std::memcpy(out.data(), start_key_text.data(), start_key_text_size);
    out[start_key_text_size] = static_cast<uint8_t>((key.marker ? start_key_flag::m : 0) |
                                                    (key.crc ? start_key_flag::c : 0) |
                                                    (key.res & start_key_flag::res) | (key.rev & start_key_flag::rev));
    return start_key_size;
}

StartupForm classify_startup(std::span<const uint8_t> bytes)
{
    // RFC 5044 keys: "MPA ID Req Frame" etc.; all begin "MPA I".
    static constexpr uint8_t frame_prefix[] = {0x4D, 0x50, 0x41, 0x20, 0x49};
    const size_t n = std::min(bytes.size(), sizeof(frame_prefix));
    const bool key_ok = n == 0 || std::memcmp(bytes.data(), start_key_text.data(), n) == 0;
    const bool frame_ok = n == 0 || std::memcmp(bytes.data(), frame_prefix, n) == 0;
    if (key_ok && frame_ok)
        return StartupForm::undecided;
    return key_ok ? StartupForm::start_key : frame_ok ? StartupForm::mpa_frame : StartupForm::neither;
}

std::optional<TerminateCode> terminate_code(StartKeyParseStatus status)
{
    if (status == StartKeyParseStatus::complete || status == StartKeyParseStatus::need_more)
        return std::nullopt;
    return TerminateCode{TerminateLayer::llp, etype::llp_mpa, ecode::mpa_invalid_request_or_reply};
}

}  // namespace iwemu::wire
