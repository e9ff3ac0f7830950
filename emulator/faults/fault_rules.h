// IWEMU_FAULTS: a list of fault-injection rules, each what × where × when
// (docs/configuration.md, docs/testing-your-application.md).  Pure parser.
//
//   rules := item ( ';' item )*
//   item  := 'seed=' N  |  action ( ',' condition )*
//   action:= 'drop:rst' | 'drop:fin' | 'crc' | 'lose' | 'terminate:' LAYER '/' ETYPE '/' ECODE
//          | 'corrupt:' FIELD | 'delay:' MS | 'stall:' MS | 'late_read:' MS | 'reject' [':' TEXT]
//   FIELD := ddp_version | rdmap_version | qn | msn | mo | stag (header_field_code() says
//            which Terminate the peer answers with)
//   condition (where): qp=N  lport=N  rport=N  port=N  opcode=NAME|N  dir=tx|rx
//   condition (when):  fpdu=N (the Nth matching FPDU)  octets=N[K|M|G] (the first
//                      matching FPDU after N octets)  ms=N (after N ms since
//                      connect)  p=F (each matching FPDU with probability F)
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include "emulator/wire/terminate_codes.h"

namespace iwemu::faults {

enum class Action : uint8_t {
    drop_rst,     // abortive close: the peer sees an RST
    drop_fin,     // both halves shut: the peer sees a FIN
    corrupt_crc,  // the FPDU leaves with its CRC's last octet inverted
    terminate,    // a Terminate with the given code goes out instead of the FPDU, then FIN
    lose,         // the FPDU never leaves (the stream closes over it): lose,fpdu=1 loses the RTR
    corrupt,      // a DDP/RDMAP header field altered (CRC recomputed): the peer's Terminate
    delay,        // received: the FPDU is placed `ms` later (reading stops at its header)
    stall,        // received: the socket is not read for `ms` (the TCP window closes)
    late_read,    // received Read Request: answered `ms` later (delay, opcode=read_request)
    reject,       // MPA Request refused with an MPA Reject carrying `text` (passive side)
};

// Header fields `corrupt` can alter (DDP RFC 5041 §4, RDMAP RFC 5040 §4).
enum class Field : uint8_t { ddp_version, rdmap_version, qn, msn, mo, stag };
// Which FPDUs carry it (untagged: Send, Read Request, Terminate; tagged:
// Write, Read Response), and the Terminate a conforming receiver answers
// an altered one with (RFC 5040 §7.2; DDP version: tagged 1/1/0x04).
bool field_in_tagged(Field f);
bool field_in_untagged(Field f);
wire::TerminateCode header_field_code(Field f, bool tagged);
// The octet (from the FPDU's first, the MPA length) and the mask XORed in.
std::pair<size_t, uint8_t> field_flip(Field f);
const char* field_name(Field f);

enum class Direction : uint8_t { tx, rx };

// RDMAP opcode classes a rule may name (RFC 5040 §4.2; send = all four Sends).
inline constexpr int opcode_send = 0x100;

struct Rule {
    Action action = Action::corrupt_crc;
    wire::TerminateCode terminate{};
    Field field = Field::ddp_version;  // corrupt
    uint32_t hold_ms = 0;               // delay, stall, late_read
    std::string private_data;           // reject
    // where
    std::optional<uint32_t> qpn;
    std::optional<uint16_t> local_port, remote_port, any_port;
    std::optional<int> opcode;  // 0..15, or opcode_send
    Direction direction = Direction::tx;
    // when (none given: the first matching FPDU)
    std::optional<uint64_t> nth_fpdu;
    std::optional<uint64_t> after_octets;
    std::optional<uint32_t> after_ms;
    std::optional<double> probability;
    std::string text;  // the rule as written
};

struct RuleSet {
    std::vector<Rule> rules;
    std::optional<uint64_t> seed;
};

struct ParseError {
    size_t position = 0;  // 1-based character position of the mistake
    std::string message;
};

std::variant<RuleSet, ParseError> parse_rules(std::string_view text);

// Whether an RDMAP opcode matches a rule's opcode condition.
bool opcode_matches(int rule_opcode, uint8_t opcode);

}  // namespace iwemu::faults
