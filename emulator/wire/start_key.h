// draft-03 "Start Key" (seed 000, draft-culley-iwarp-mpa-03 §8.1.1): the one,
// symmetric startup declaration each side sends before MPA Full Operation,
// in place of RFC 5044's Request/Reply frames.  Pure codec over byte spans.
//
// The draft's Figure 7 (the layout) is lost from the seed; its text gives the
// fields in order -- Key "MPA ident frame" (15 octets, listed in hex), M, C,
// Res, Rev -- and says Res is "not checked" and Rev MUST be checked for 0.
// iwemu's reading (docs/interop.md "draft-03 Start Key"): 16 octets, the key
// then one octet, bit numbering as RFC 5044 (bit 0 = most significant):
//   +0 Key (15) | +15 M(0x80) C(0x40) Res(0x30) Rev(0x0F)
// Accepted on receive as well (the layout RFC 5044 later gave its frames: a
// flags octet, then a whole Rev octet, then PD_Length): up to 3 octets after
// the 16 that are all zero (Rev 0, PD_Length 0).  By the draft's role order
// (§8.1 rules 2, 4, 5) nothing else can follow a Start Key until the
// receiver acts, so octets already there are the key's own.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <string_view>

#include "emulator/wire/terminate_codes.h"

namespace iwemu::wire {

inline constexpr size_t start_key_text_size = 15;
inline constexpr size_t start_key_size = 16;
// Trailing zero octets a variant layout may add (separate Rev octet, PD_Length).
inline constexpr size_t start_key_max_trailer = 3;

// "MPA ident frame" (§8.1.1: 4D 50 41 20 69 64 65 6E 74 20 66 72 61 6D 65).
inline constexpr std::array<uint8_t, start_key_text_size> start_key_text{
    0x4D, 0x50, 0x41, 0x20, 0x69, 0x64, 0x65, 0x6E, 0x74, 0x20, 0x66, 0x72, 0x61, 0x6D, 0x65};

namespace start_key_flag {
inline constexpr uint8_t m = 0x80;    // receiver requires markers in what it receives
inline constexpr uint8_t c = 0x40;    // CRC preferred (either side's 1 => CRC both ways)
inline constexpr uint8_t res = 0x30;  // reserved: sent 0, not checked
inline constexpr uint8_t rev = 0x0F;  // Revision: 0, checked
}  // namespace start_key_flag

struct StartKey {
    bool marker = false;  // M
    bool crc = false;     // C
    uint8_t res = 0;      // as received (encode: sent as given, normally 0)
    uint8_t rev = 0;      // as received; only 0 parses as complete
};

enum class StartKeyParseStatus : uint8_t {
    complete,      // 16 octets used
    need_more,     // at least `need` more octets
    bad_key,       // not "MPA ident frame": draft-03 error 4 "invalid Start Key"
    bad_revision,  // Rev != 0: close (§8.1.1 Rev)
    truncated,     // end of stream inside the key
};

std::string_view to_string(StartKeyParseStatus status);

struct StartKeyParseResult {
    StartKeyParseStatus status = StartKeyParseStatus::need_more;
    size_t need = 0;
    StartKey key;
};

// Parse the Start Key at the start of `bytes` (all received so far).  A wrong
// key octet is reported as soon as it is in.
StartKeyParseResult parse_start_key(std::span<const uint8_t> bytes, bool end_of_stream = false);

// Octets of a variant trailer at the start of `after` (the octets that had
// arrived right behind a complete Start Key): 0, 1 (a zero Rev octet) or 3
// (zero Rev octet and zero PD_Length).  Never more than what is all zero.
size_t start_key_trailer_size(std::span<const uint8_t> after);

// Encode into `out` (>= 16 octets).  Returns 16, or 0 if `out` is too small.
size_t encode_start_key(const StartKey& key, std::span<uint8_t> out);

// What the first octets of a stream open: the two startup forms share the
// prefix "MPA " and part at octet 4 ('i' vs 'I').
enum class StartupForm : uint8_t { undecided, start_key, mpa_frame, neither };
StartupForm classify_startup(std::span<const uint8_t> bytes);

// draft-03 §9 error 4 carried as the RFC 5044 code with the same number
// (LLP / MPA / 0x04, "Invalid MPA Request or Reply"), for CM events.
std::optional<TerminateCode> terminate_code(StartKeyParseStatus status);

}  // namespace iwemu::wire
