// libFuzzer target: the MPA startup frame parser.
// Input: 1 option octet (bits 0-1: expected 0 Request, 1 Reply, 2 Rtr,
// 3 any; bit 2: end of stream), then the received octets.
// Checks: no crash; every prefix of a complete frame is need_more (never an
// error, never overshooting); a parsed frame re-encodes to the same octets
// (Rtr key normalised to the printed spelling) and re-parses to the same fields.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <span>
#include <vector>

#include "emulator/wire/mpa_frame.h"

using namespace iwemu::wire;

namespace {
[[noreturn]] void fail() { std::abort(); }
}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size)
{
    if (size < 1) return 0;
    std::optional<MpaFrameType> expected;
    switch (data[0] & 3) {
    case 0: expected = MpaFrameType::request; break;
    case 1: expected = MpaFrameType::reply; break;
    case 2: expected = MpaFrameType::rtr; break;
    default: break;
    }
    const bool eos = data[0] & 4;
    const std::span<const uint8_t> bytes(data + 1, size - 1);

    const MpaParseResult r = parse_mpa_frame(bytes, expected, eos);
    const bool error = terminate_code(r.status).has_value();
    if (error != (r.status != MpaParseStatus::complete && r.status != MpaParseStatus::need_more)) fail();
    if (r.status == MpaParseStatus::need_more && (eos || r.need == 0)) fail();
    if (r.status != MpaParseStatus::complete) return 0;

    const MpaFrame& f = r.frame;
    if (r.frame_size > bytes.size() || r.frame_size != f.wire_size()) fail();
    if (expected && f.type != *expected) fail();
    if (f.private_data.size() &&
        (f.private_data.data() < bytes.data() ||
         f.private_data.data() + f.private_data.size() > bytes.data() + r.frame_size))
        fail();

    for (size_t have = 0; have < r.frame_size; ++have) {
        const auto p = parse_mpa_frame(bytes.first(have), expected, false);
        if (p.status != MpaParseStatus::need_more || have + p.need > r.frame_size) fail();
    }

    std::vector<uint8_t> out(r.frame_size);
    if (encode_mpa_frame(f, out) != r.frame_size) fail();
    std::vector<uint8_t> want(bytes.begin(), bytes.begin() + r.frame_size);
    if (f.type == MpaFrameType::rtr) std::memcpy(want.data(), mpa_rtr_key.data(), mpa_key_size);
    // S is re-derived (set when enhanced data is present); otherwise identical.
    if (out != want) fail();
    const MpaParseResult again = parse_mpa_frame(out, f.type, true);
    if (again.status != MpaParseStatus::complete || again.frame.enhanced != f.enhanced ||
        again.frame.res != f.res || again.frame.s != f.s || again.frame.rev != f.rev)
        fail();
    return 0;
}
