#include "emulator/faults/fault_rules.h"

#include <cstdlib>

namespace iwemu::faults {

namespace {

struct Token {
    std::string_view text;
    size_t pos;  // 0-based offset in the whole setting
};

Token trim(Token t)
{
    while (!t.text.empty() && (t.text.front() == ' ' || t.text.front() == '\t')) {
        t.text.remove_prefix(1);
        ++t.pos;
    }
    while (!t.text.empty() && (t.text.back() == ' ' || t.text.back() == '\t')) t.text.remove_suffix(1);
    return t;
}

std::vector<Token> split(Token t, char sep)
{
    std::vector<Token> out;
    size_t start = 0;
    for (size_t i = 0; i <= t.text.size(); ++i) {
        if (i == t.text.size() || t.text[i] == sep) {
            out.push_back(trim({t.text.substr(start, i - start), t.pos + start}));
            start = i + 1;
        }
    }
    return out;
}

bool parse_uint(std::string_view v, uint64_t max, uint64_t& out)
{
    if (v.empty() || v.size() > 20) return false;
    int base = 10;
    if (v.size() > 2 && v[0] == '0' && (v[1] == 'x' || v[1] == 'X')) {
        base = 16;
        v.remove_prefix(2);
    }
    uint64_t n = 0;
    for (char c : v) {
        int d;
        if (c >= '0' && c <= '9') d = c - '0';
        else if (base == 16 && c >= 'a' && c <= 'f') d = c - 'a' + 10;
        else if (base == 16 && c >= 'A' && c <= 'F') d = c - 'A' + 10;
        else return false;
        if (static_cast<uint64_t>(d) > max || n > (max - static_cast<uint64_t>(d)) / static_cast<uint64_t>(base)) return false;
        n = n * static_cast<uint64_t>(base) + static_cast<uint64_t>(d);
    }
    out = n;
    return true;
}

bool parse_size(std::string_view v, uint64_t& out)
{
    uint64_t mult = 1;
    if (!v.empty()) {
        const char s = v.back();
        if (s == 'K' || s == 'k') mult = 1ull << 10;
        else if (s == 'M' || s == 'm') mult = 1ull << 20;
        else if (s == 'G' || s == 'g') mult = 1ull << 30;
        if (mult != 1) v.remove_suffix(1);
    }
    uint64_t n;
    if (!parse_uint(v, (1ull << 62) / mult, n)) return false;
    out = n * mult;
    return true;
}

bool parse_probability(std::string_view v, double& out)
{
    if (v.empty() || v.size() > 32) return false;
    const std::string s(v);
    char* end = nullptr;
    const double d = std::strtod(s.c_str(), &end);
    if (*end != '\0' || !(d >= 0.0 && d <= 1.0)) return false;
    out = d;
    return true;
}

std::optional<int> parse_opcode(std::string_view v)
{
    if (v == "write") return 0x0;
    if (v == "read_request" || v == "read") return 0x1;
    if (v == "read_response") return 0x2;
    if (v == "send") return opcode_send;
    if (v == "terminate") return 0x7;
    uint64_t n;
    if (parse_uint(v, 15, n)) return static_cast<int>(n);
    return std::nullopt;
}

ParseError error_at(size_t pos0, std::string msg) { return {pos0 + 1, std::move(msg)}; }

std::optional<ParseError> parse_action(Token a, Rule& r)
{
    const size_t colon = a.text.find(':');
    const std::string_view name = a.text.substr(0, colon);
    const std::string_view arg = colon == std::string_view::npos ? std::string_view{} : a.text.substr(colon + 1);
    const size_t arg_pos = a.pos + (colon == std::string_view::npos ? a.text.size() : colon + 1);
    if (name == "drop") {
        if (arg == "rst") r.action = Action::drop_rst;
        else if (arg == "fin") r.action = Action::drop_fin;
        else return error_at(arg_pos, "drop takes :rst or :fin");
        return std::nullopt;
    }
    if (name == "crc") {
        if (colon != std::string_view::npos) return error_at(arg_pos, "crc takes no argument");
        r.action = Action::corrupt_crc;
        return std::nullopt;
    }
    if (name == "lose") {
        if (colon != std::string_view::npos) return error_at(arg_pos, "lose takes no argument");
        r.action = Action::lose;
        return std::nullopt;
    }
    if (name == "terminate") {
        // LAYER/ETYPE/ECODE, numbers (RFC 5040 §7.2 / RFC 6581 registries).
        const auto parts = split({arg, arg_pos}, '/');
        if (colon == std::string_view::npos || parts.size() != 3)
            return error_at(arg_pos, "terminate takes :LAYER/ETYPE/ECODE (e.g. terminate:2/0/0x02)");
        uint64_t v[3];
        const uint64_t max[3] = {2, 15, 255};
        for (int i = 0; i < 3; ++i)
            if (!parse_uint(parts[static_cast<size_t>(i)].text, max[i], v[i]))
                return error_at(parts[static_cast<size_t>(i)].pos,
                                i == 0 ? "layer is 0 (RDMAP), 1 (DDP) or 2 (LLP)" : i == 1 ? "etype is 0..15" : "ecode is 0..255");
        r.action = Action::terminate;
        r.terminate = {static_cast<wire::TerminateLayer>(v[0]), static_cast<uint8_t>(v[1]), static_cast<uint8_t>(v[2])};
        return std::nullopt;
    }
    if (name == "corrupt") {
        static constexpr std::pair<std::string_view, Field> fields[] = {
            {"ddp_version", Field::ddp_version}, {"rdmap_version", Field::rdmap_version}, {"qn", Field::qn},
            {"msn", Field::msn},                 {"mo", Field::mo},                       {"stag", Field::stag}};
        for (const auto& [n, f] : fields)
            if (colon != std::string_view::npos && arg == n) {
                r.action = Action::corrupt;
                r.field = f;
                return std::nullopt;
            }
        return error_at(arg_pos, "corrupt takes :ddp_version, :rdmap_version, :qn, :msn, :mo or :stag");
    }
    if (name == "delay" || name == "stall" || name == "late_read") {
        uint64_t ms;
        if (colon == std::string_view::npos || !parse_uint(arg, 600000, ms) || ms == 0)
            return error_at(arg_pos, std::string(name) + " takes :MS, 1..600000 milliseconds");
        r.action = name == "delay" ? Action::delay : name == "stall" ? Action::stall : Action::late_read;
        r.hold_ms = static_cast<uint32_t>(ms);
        r.direction = Direction::rx;  // they act on what this side receives
        if (r.action == Action::late_read) r.opcode = 0x1;
        return std::nullopt;
    }
    if (name == "reject") {
        // MPA private data: at most 512 octets less RFC 6581's 8 (§7.1).
        if (arg.size() > 504) return error_at(arg_pos, "reject's private data is at most 504 characters");
        if (arg.find_first_of(",;") != std::string_view::npos) return error_at(arg_pos, "reject's text has no ',' or ';'");
        r.action = Action::reject;
        r.private_data = std::string(arg);
        return std::nullopt;
    }
    return error_at(a.pos, "unknown action '" + std::string(name) +
                               "' (drop:rst, drop:fin, crc, lose, terminate:L/E/C, corrupt:FIELD, delay:MS, stall:MS, "
                               "late_read:MS, reject[:TEXT])");
}

std::optional<ParseError> parse_condition(Token c, Rule& r)
{
    const size_t eq = c.text.find('=');
    if (eq == std::string_view::npos || eq == 0) return error_at(c.pos, "expected key=value");
    const std::string_view key = c.text.substr(0, eq), v = c.text.substr(eq + 1);
    const size_t vpos = c.pos + eq + 1;
    uint64_t n = 0;
    if (key == "qp") {
        if (!parse_uint(v, 0xFFFFFFFF, n)) return error_at(vpos, "qp takes a QP number");
        r.qpn = static_cast<uint32_t>(n);
    } else if (key == "lport" || key == "rport" || key == "port") {
        if (!parse_uint(v, 65535, n) || n == 0) return error_at(vpos, "a port is 1..65535");
        (key == "lport" ? r.local_port : key == "rport" ? r.remote_port : r.any_port) = static_cast<uint16_t>(n);
    } else if (key == "opcode") {
        const auto op = parse_opcode(v);
        if (!op) return error_at(vpos, "opcode is write, read_request, read_response, send, terminate or 0..15");
        r.opcode = *op;
    } else if (key == "dir") {
        if (v == "tx") r.direction = Direction::tx;
        else if (v == "rx") r.direction = Direction::rx;
        else return error_at(vpos, "dir is tx or rx");
    } else if (key == "fpdu") {
        if (!parse_uint(v, UINT64_MAX, n) || n == 0) return error_at(vpos, "fpdu counts from 1");
        r.nth_fpdu = n;
    } else if (key == "octets") {
        if (!parse_size(v, n)) return error_at(vpos, "octets takes N, NK, NM or NG");
        r.after_octets = n;
    } else if (key == "ms") {
        if (!parse_uint(v, 86400000, n)) return error_at(vpos, "ms takes 0..86400000");
        r.after_ms = static_cast<uint32_t>(n);
    } else if (key == "p") {
        double p;
        if (!parse_probability(v, p)) return error_at(vpos, "p is a probability 0..1");
        r.probability = p;
    } else {
        return error_at(c.pos, "unknown condition '" + std::string(key) +
                                   "' (qp, lport, rport, port, opcode, dir, fpdu, octets, ms, p)");
    }
    return std::nullopt;
}

}  // namespace

bool field_in_tagged(Field f) { return f != Field::qn && f != Field::msn && f != Field::mo; }
bool field_in_untagged(Field f) { return f != Field::stag; }

wire::TerminateCode header_field_code(Field f, bool tagged)
{
    using wire::TerminateLayer;
    namespace et = wire::etype;
    namespace ec = wire::ecode;
    switch (f) {
    case Field::ddp_version:
        return tagged ? wire::TerminateCode{TerminateLayer::ddp, et::ddp_tagged_buffer, ec::ddp_tagged_invalid_ddp_version}
                      : wire::TerminateCode{TerminateLayer::ddp, et::ddp_untagged_buffer, ec::ddp_untagged_invalid_ddp_version};
    case Field::rdmap_version:
        return {TerminateLayer::rdmap, et::rdmap_remote_operation, ec::rdmap_invalid_rdmap_version};
    case Field::qn: return {TerminateLayer::ddp, et::ddp_untagged_buffer, ec::ddp_untagged_invalid_qn};
    case Field::msn: return {TerminateLayer::ddp, et::ddp_untagged_buffer, ec::ddp_untagged_invalid_msn_range};
    case Field::mo: return {TerminateLayer::ddp, et::ddp_untagged_buffer, ec::ddp_untagged_invalid_mo};
    case Field::stag: return {TerminateLayer::ddp, et::ddp_tagged_buffer, ec::ddp_tagged_invalid_stag};
    }
    return {};
}

// Offsets from the FPDU's start: MPA ULPDU_Length (2), DDP control (2: T L
// Rsvd DV | RV Rsvd Opcode), then tagged STag(4) TO(8) or untagged
// reserved(4) QN(4) MSN(4) MO(4) (RFC 5041 §4.2-4.4, RFC 5040 §4.1).
std::pair<size_t, uint8_t> field_flip(Field f)
{
    switch (f) {
    case Field::ddp_version: return {2, 0x03};    // DV 1 -> 2
    case Field::rdmap_version: return {3, 0xC0};  // RV 1 -> 2
    case Field::qn: return {11, 0x04};            // QN 0..2 -> 4..6: no such queue
    case Field::msn: return {12, 0x40};           // MSN 2^30 ahead: out of range
    case Field::mo: return {17, 0x40};            // MO 4 MiB on: beyond any receive
    case Field::stag: return {4, 0xA5};           // STag index: not registered
    }
    return {2, 0};
}

const char* field_name(Field f)
{
    switch (f) {
    case Field::ddp_version: return "ddp_version";
    case Field::rdmap_version: return "rdmap_version";
    case Field::qn: return "qn";
    case Field::msn: return "msn";
    case Field::mo: return "mo";
    case Field::stag: return "stag";
    }
    return "?";
}

bool opcode_matches(int rule_opcode, uint8_t opcode)
{
    if (rule_opcode == opcode_send) return opcode >= 0x3 && opcode <= 0x6;
    return rule_opcode == opcode;
}

std::variant<RuleSet, ParseError> parse_rules(std::string_view text)
{
    RuleSet set;
    for (const Token& item : split({text, 0}, ';')) {
        if (item.text.empty()) continue;  // "a; ;b" and a trailing ';' are fine
        if (item.text.substr(0, 5) == "seed=") {
            uint64_t s;
            if (!parse_uint(item.text.substr(5), UINT64_MAX, s)) return error_at(item.pos + 5, "seed takes a number");
            set.seed = s;
            continue;
        }
        const auto parts = split(item, ',');
        Rule r;
        r.text = std::string(item.text);
        if (parts[0].text.empty()) return error_at(parts[0].pos, "a rule starts with its action");
        if (auto e = parse_action(parts[0], r)) return *e;
        for (size_t i = 1; i < parts.size(); ++i)
            if (auto e = parse_condition(parts[i], r)) return *e;
        const bool receives = r.action == Action::delay || r.action == Action::stall || r.action == Action::late_read;
        if (receives && r.direction != Direction::rx)
            return error_at(item.pos, "delay, stall and late_read act on received FPDUs (no dir=tx)");
        if (r.direction == Direction::rx && !receives && r.action != Action::drop_rst && r.action != Action::drop_fin)
            return error_at(item.pos, "only drop, delay, stall and late_read act on received FPDUs (dir=rx)");
        if (r.action == Action::late_read && r.opcode != 0x1)
            return error_at(item.pos, "late_read acts on Read Requests only (no opcode=)");
        if (r.action == Action::reject && (r.opcode || r.qpn || r.after_octets || r.direction == Direction::rx))
            return error_at(item.pos, "reject takes port conditions (lport, rport, port) and fpdu=N (the Nth request), p=, ms=");
        if (r.action == Action::corrupt && r.opcode &&
            !(field_in_tagged(r.field) && (*r.opcode == 0x0 || *r.opcode == 0x2)) &&
            !(field_in_untagged(r.field) && *r.opcode != 0x0 && *r.opcode != 0x2))
            return error_at(item.pos, std::string("that opcode's FPDUs have no ") + field_name(r.field) + " field");
        if (r.nth_fpdu && r.probability) return error_at(item.pos, "fpdu= and p= exclude each other");
        set.rules.push_back(std::move(r));
    }
    return set;
}

}  // namespace iwemu::faults
