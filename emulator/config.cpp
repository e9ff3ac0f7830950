#include "emulator/config.h"

#include <net/if.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <variant>

#include "emulator/faults/fault_rules.h"
#include "emulator/base/log.h"
#include "emulator/tcp_socket_tuning.h"

namespace iwemu {

namespace {

std::string_view trim(std::string_view s)
{
    while (!s.empty() && (s.front() == ' ' || s.front() == '\t' || s.front() == '\r')) s.remove_prefix(1);
    while (!s.empty() && (s.back() == ' ' || s.back() == '\t' || s.back() == '\r')) s.remove_suffix(1);
    return s;
}

bool parse_bool(std::string_view v, bool* out)
{
    if (v == "1" || v == "on" || v == "yes" || v == "true") { *out = true; return true; }
    if (v == "0" || v == "off" || v == "no" || v == "false") { *out = false; return true; }
    return false;
}

bool parse_u32(std::string_view v, uint32_t lo, uint32_t hi, uint32_t* out)
{
    if (v.empty() || v.size() > 10) return false;
    uint64_t n = 0;
    for (char c : v) {
        if (c < '0' || c > '9') return false;
        n = n * 10 + static_cast<uint64_t>(c - '0');
    }
    if (n < lo || n > hi) return false;
    *out = static_cast<uint32_t>(n);
    return true;
}

bool valid_rtr_list(std::string_view v)
{
    if (v == "none") return true;
    while (!v.empty()) {
        const size_t comma = v.find(',');
        const std::string_view item = trim(v.substr(0, comma));
        if (item != "write" && item != "read" && item != "send") return false;
        if (comma == std::string_view::npos) break;
        v.remove_prefix(comma + 1);
    }
    return true;
}

// A size in octets with an optional K, M or G (binary multiples).
bool parse_size(std::string_view v, uint64_t* out)
{
    uint64_t mult = 1;
    if (!v.empty()) {
        switch (v.back()) {
        case 'k': case 'K': mult = uint64_t{1} << 10; break;
        case 'm': case 'M': mult = uint64_t{1} << 20; break;
        case 'g': case 'G': mult = uint64_t{1} << 30; break;
        default: break;
        }
        if (mult != 1) v.remove_suffix(1);
    }
    uint32_t n = 0;
    if (!parse_u32(v, 0, 0xFFFFFFFF, &n)) return false;
    *out = uint64_t{n} * mult;
    return true;
}

// auto, system, or what a TCP congestion control module may be called.
bool valid_congestion_control(std::string_view v)
{
    if (v.empty() || v.size() >= tcp_ca_name_max) return false;
    for (char c : v)
        if (!((c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '_' || c == '-')) return false;
    return true;
}

// key (file spelling) ↔ environment variable.
struct Key { const char* file; const char* env; };
constexpr Key keys[] = {
    {"crc", "IWEMU_CRC"},
    {"markers", "IWEMU_MARKERS"},
    {"mpa_rev", "IWEMU_MPA_REV"},
    {"mpa_rev0", "IWEMU_MPA_REV0"},
    {"mpa_startup", "IWEMU_MPA_STARTUP"},
    {"p2p", "IWEMU_P2P"},
    {"rtr", "IWEMU_RTR"},
    {"seed_rtr", "IWEMU_SEED_RTR"},
    {"responder_wait_ms", "IWEMU_RESPONDER_WAIT_MS"},
    {"peer_wakeup", "IWEMU_PEER_WAKEUP"},
    {"close_grace_ms", "IWEMU_CLOSE_GRACE_MS"},
    {"mpa_timeout_ms", "IWEMU_MPA_TIMEOUT_MS"},
    {"connect_retries", "IWEMU_CONNECT_RETRIES"},
    {"oob_timeout_ms", "IWEMU_OOB_TIMEOUT_MS"},
    {"rnr_wait_ms", "IWEMU_RNR_WAIT_MS"},
    {"max_half_open", "IWEMU_MAX_HALF_OPEN"},
    {"ird", "IWEMU_IRD"},
    {"ord", "IWEMU_ORD"},
    {"rfc7306", "IWEMU_RFC7306"},
    {"busy_poll", "IWEMU_BUSY_POLL"},
    {"busy_poll_us", "IWEMU_BUSY_POLL_US"},
    {"poll_progress", "IWEMU_POLL_PROGRESS"},
    {"poll_owns_rx", "IWEMU_POLL_OWNS_RX"},
    {"event_waiter_receives", "IWEMU_EVENT_WAITER_RECEIVES"},
    {"rx_lookahead", "IWEMU_RX_LOOKAHEAD"},
    {"tx_coalesce", "IWEMU_TX_COALESCE"},
    {"tcp_congestion", "IWEMU_TCP_CONGESTION"},
    {"liveness_timeout_ms", "IWEMU_LIVENESS_TIMEOUT_MS"},
    {"netdev", "IWEMU_NETDEV"},
    {"log", "IWEMU_LOG"},
    {"capture", "IWEMU_CAPTURE"},
    {"capture_snaplen", "IWEMU_CAPTURE_SNAPLEN"},
    {"capture_payload", "IWEMU_CAPTURE_PAYLOAD"},
    {"capture_max_size", "IWEMU_CAPTURE_MAX_SIZE"},
    {"capture_files", "IWEMU_CAPTURE_FILES"},
    {"faults", "IWEMU_FAULTS"},
};

}  // namespace

bool Config::set(std::string_view key, std::string_view value, std::string* error)
{
    value = trim(value);
    uint32_t n = 0;
    bool ok = true;
    if (key == "crc") ok = parse_bool(value, &crc);
    else if (key == "markers") ok = parse_bool(value, &markers);
    else if (key == "mpa_rev") { ok = parse_u32(value, 0, 2, &n); if (ok) mpa_revision = static_cast<uint8_t>(n); }
    else if (key == "mpa_rev0") {
        if (value == "accept") mpa_rev0_accept = true;
        else if (value == "reject") mpa_rev0_accept = false;
        else ok = parse_bool(value, &mpa_rev0_accept);
    }
    else if (key == "mpa_startup") {
        if (value == "frames") mpa_start_key = false;
        else if (value == "startkey" || value == "start_key" || value == "draft03") mpa_start_key = true;
        else ok = false;
    }
    else if (key == "p2p") ok = parse_bool(value, &peer_to_peer);
    else if (key == "rtr") { ok = valid_rtr_list(value); if (ok) rtr_types = std::string(value); }
    else if (key == "seed_rtr") ok = parse_bool(value, &seed_rtr_frame);
    else if (key == "responder_wait_ms") ok = parse_u32(value, 0, 600000, &responder_wait_ms);
    else if (key == "peer_wakeup") ok = parse_bool(value, &peer_wakeup);
    else if (key == "close_grace_ms") ok = parse_u32(value, 0, 10000, &close_grace_ms);
    else if (key == "mpa_timeout_ms") ok = parse_u32(value, 100, 600000, &mpa_timeout_ms);
    else if (key == "connect_retries") ok = parse_u32(value, 0, 100, &connect_retries);
    else if (key == "oob_timeout_ms") ok = parse_u32(value, 100, 600000, &oob_timeout_ms);
    else if (key == "rnr_wait_ms") ok = parse_u32(value, 0, 600000, &rnr_wait_ms);
    else if (key == "max_half_open") ok = parse_u32(value, 1, 65536, &max_half_open);
    else if (key == "ird") { ok = parse_u32(value, 0, 128, &n); if (ok) ird = static_cast<uint16_t>(n); }
    else if (key == "ord") { ok = parse_u32(value, 0, 128, &n); if (ok) ord = static_cast<uint16_t>(n); }
    else if (key == "rfc7306") ok = parse_bool(value, &rfc7306);
    else if (key == "busy_poll") {
        bool on = false;
        if (value == "auto") busy_poll = BusyPoll::idle_app;
        else if ((ok = parse_bool(value, &on))) busy_poll = on ? BusyPoll::on : BusyPoll::off;
    }
    else if (key == "busy_poll_us") ok = parse_u32(value, 0, 1000000, &busy_poll_us);
    else if (key == "poll_progress") ok = parse_bool(value, &rx_progress_on_poll);
    else if (key == "poll_owns_rx") ok = parse_bool(value, &poll_owns_rx);
    else if (key == "event_waiter_receives") ok = parse_bool(value, &event_waiter_receives);
    else if (key == "rx_lookahead") {
        if (value == "auto") rx_lookahead = 0;
        else ok = parse_u32(value, rx_lookahead_min, rx_lookahead_max, &rx_lookahead);
    }
    else if (key == "tx_coalesce") ok = parse_bool(value, &tx_coalesce);
    else if (key == "tcp_congestion") {
        ok = valid_congestion_control(value);
        if (ok) tcp_congestion = std::string(value);
    }
    else if (key == "liveness_timeout_ms") ok = parse_u32(value, 0, 3600000, &liveness_timeout_ms);
    else if (key == "netdev") {
        ok = value.size() < IFNAMSIZ && value.find_first_of("/ \t") == std::string_view::npos;
        if (ok) netdev = std::string(value);
    }
    else if (key == "capture") {
        const std::string why = capture::check_path(value);
        if (!why.empty()) {
            if (error) *error = "bad value '" + std::string(value) + "' for 'capture': " + why;
            return false;
        }
        capture.path = std::string(value);
    }
    else if (key == "capture_snaplen") ok = parse_u32(value, 64, 262144, &capture.snaplen);
    else if (key == "capture_payload") {
        if (value == "all") capture.payload_keep = UINT32_MAX;
        else ok = parse_u32(value, 0, 65535, &capture.payload_keep);
    }
    else if (key == "capture_max_size") {
        ok = parse_size(value, &capture.max_file_bytes) && (capture.max_file_bytes == 0 || capture.max_file_bytes >= 65536);
    }
    else if (key == "faults") {
        const auto parsed = faults::parse_rules(value);
        if (const auto* e = std::get_if<faults::ParseError>(&parsed)) {
            if (error) *error = "bad value for 'faults' at position " + std::to_string(e->position) + ": " + e->message;
            faults_error = "position " + std::to_string(e->position) + ": " + e->message + "\n  " + std::string(value) +
                           "\n  " + std::string(e->position - 1, ' ') + "^";
            this->faults.clear();
            return false;
        }
        this->faults = std::string(value);
        faults_error.clear();  // the environment's rules replace the file's
    }
    else if (key == "capture_files") ok = parse_u32(value, 1, 1000, &capture.files);
    else if (key == "rdma_link") {
        // "NAME NETDEV": a device added by `rdma link add` (kmod-shim/rdma_links.h).
        const size_t sp = value.find_first_of(" \t");
        const std::string_view name = value.substr(0, sp);
        const std::string_view dev = sp == std::string_view::npos ? std::string_view{} : trim(value.substr(sp));
        ok = !name.empty() && name.size() < 64 && name.find('/') == std::string_view::npos && name[0] != '.' &&
             !dev.empty() && dev.size() < IFNAMSIZ && dev.find_first_of("/ \t") == std::string_view::npos;
        if (ok) rdma_links.emplace_back(std::string(name), std::string(dev));
    }
    else if (key == "log") {
        if (value == "error") log_level = LogLevel::error;
        else if (value == "warn") log_level = LogLevel::warn;
        else if (value == "info") log_level = LogLevel::info;
        else if (value == "debug") log_level = LogLevel::debug;
        else ok = false;
    } else {
        if (error) *error = "unknown setting '" + std::string(key) + "'";
        return false;
    }
    if (!ok && error)
        *error = "bad value '" + std::string(value) + "' for '" + std::string(key) + "'";
    return ok;
}

int parse_config_text(std::string_view text, Config& cfg, std::string* report)
{
    int errors = 0;
    int line_no = 0;
    while (!text.empty()) {
        const size_t nl = text.find('\n');
        std::string_view line = text.substr(0, nl);
        text.remove_prefix(nl == std::string_view::npos ? text.size() : nl + 1);
        ++line_no;
        if (const size_t hash = line.find('#'); hash != std::string_view::npos) line = line.substr(0, hash);
        line = trim(line);
        if (line.empty()) continue;
        const size_t eq = line.find('=');
        std::string err;
        if (eq == std::string_view::npos) {
            err = "expected 'key = value'";
        } else if (cfg.set(trim(line.substr(0, eq)), line.substr(eq + 1), &err)) {
            continue;
        }
        ++errors;
        if (report) *report += "line " + std::to_string(line_no) + ": " + err + "\n";
    }
    return errors;
}

std::string user_config_path()
{
    if (const char* p = std::getenv("IWEMU_CONFIG"); p && *p) return p;
    if (const char* home = std::getenv("HOME"); home && *home) return std::string(home) + "/.config/iwemu.conf";
    return "";
}

Config load_config()
{
    Config cfg;
    std::string path = user_config_path();
    if (!std::getenv("IWEMU_CONFIG") || !*std::getenv("IWEMU_CONFIG"))
        if (!path.empty() && !std::ifstream(path).good()) path.clear();
    if (!path.empty()) {
        std::ifstream in(path);
        if (!in) {
            std::fprintf(stderr, "iwemu: cannot read config file %s\n", path.c_str());
        } else {
            std::stringstream ss;
            ss << in.rdbuf();
            std::string report;
            if (parse_config_text(ss.str(), cfg, &report) > 0)
                std::fprintf(stderr, "iwemu: %s:\n%s", path.c_str(), report.c_str());
            cfg.config_file = path;
        }
    }
    for (const Key& k : keys) {
        const char* v = std::getenv(k.env);
        if (!v) continue;
        std::string err;
        // A rule that does not parse is reported by whoever starts (faults_error).
        if (!cfg.set(k.file, v, &err) && std::string_view(k.file) != "faults")
            std::fprintf(stderr, "iwemu: %s: %s (ignored)\n", k.env, err.c_str());
    }
    return cfg;
}

}  // namespace iwemu
