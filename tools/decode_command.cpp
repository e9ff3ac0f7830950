// `iwemu decode [options] FILE|-`: read one direction of a TCP byte stream
// (raw octets, e.g. tshark -T fields -e tcp.payload of one direction), or a
// pcap/pcapng capture (both directions of the chosen connections), and
// decode it with stream_decoder.
#include "tools/decode_command.h"

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <string_view>
#include <vector>

#include "tools/capture_streams.h"
#include "tools/stream_decoder.h"
#include "emulator/wire/start_key.h"

namespace iwemu::tools {
namespace {

constexpr int exit_usage = 1;

bool parse_on_off(std::string_view v, bool& out)
{
    if (v == "on" || v == "1" || v == "yes") {
        out = true;
        return true;
    }
    if (v == "off" || v == "0" || v == "no") {
        out = false;
        return true;
    }
    return false;
}

bool parse_u32(std::string_view v, uint32_t& out)
{
    if (v.empty() || v.size() > 20)
        return false;
    const std::string s(v);
    char* end = nullptr;
    errno = 0;
    const unsigned long long n = std::strtoull(s.c_str(), &end, 0);
    if (errno || *end || s[0] == '-' || n > 0xFFFFFFFFull)
        return false;
    out = static_cast<uint32_t>(n);
    return true;
}

bool read_all(std::FILE* f, std::vector<uint8_t>& data)
{
    uint8_t buf[65536];
    size_t n;
    while ((n = std::fread(buf, 1, sizeof buf, f)) > 0)
        data.insert(data.end(), buf, buf + n);
    return !std::ferror(f);
}

bool is_capture_file(const std::vector<uint8_t>& d)
{
    if (d.size() < 4) return false;
    const uint32_t m = uint32_t{d[0]} | uint32_t{d[1]} << 8 | uint32_t{d[2]} << 16 | uint32_t{d[3]} << 24;
    return m == 0x0A0D0D0A || m == 0xA1B2C3D4 || m == 0xD4C3B2A1 || m == 0xA1B23C4D || m == 0x4D3CB2A1;
}

bool opens_mpa_frame(const std::vector<uint8_t>& b)
{
    static constexpr char prefix[] = "MPA ID R";
    return (b.size() >= 20 && std::memcmp(b.data(), prefix, 8) == 0) ||
           (b.size() >= wire::start_key_size &&
            std::memcmp(b.data(), wire::start_key_text.data(), wire::start_key_text_size) == 0);
}

// The M/C flags octet of a startup frame (+16) or a draft-03 Start Key (+15).
uint8_t startup_flags(const std::vector<uint8_t>& b)
{
    return b[0] == 0x4D && b.size() > 4 && b[4] == 0x69 ? b[wire::start_key_text_size] : b[16];
}

// Both directions of each chosen connection: the startup frames give the
// CRC (either side's C bit, RFC 5044 §7.1.1) and the markers of a direction
// (the M bit of the frame its receiver sent).
int decode_capture(const std::vector<uint8_t>& data, const ConnectionChoice& choice, const DecodeOptions& base,
                   bool crc_given)
{
    std::string error;
    const auto all = read_connections(data, &error);
    if (!error.empty()) std::fprintf(stderr, "iwemu decode: capture: %s (read what came before)\n", error.c_str());
    const auto chosen = choose(all, choice);
    if (chosen.empty()) {
        std::fprintf(stderr, "iwemu decode: no TCP connection in the capture matches (%zu in it)\n", all.size());
        for (const auto& c : all) {
            std::fprintf(stderr, "  %s <-> %s", format_endpoint(c.a_to_b.src).c_str(), format_endpoint(c.a_to_b.dst).c_str());
            for (uint32_t q : c.qpns) std::fprintf(stderr, " qp=%u", q);
            std::fputc('\n', stderr);
        }
        return exit_usage;
    }
    int rc = decode_ok;
    for (const CapturedConnection* c : chosen) {
        const CapturedDirection* dirs[2] = {&c->a_to_b, &c->b_to_a};
        bool crc = false;
        for (const auto* d : dirs)
            if (opens_mpa_frame(d->bytes) && (startup_flags(d->bytes) & 0x40)) crc = true;
        for (int i = 0; i < 2; ++i) {
            const CapturedDirection& d = *dirs[i];
            const CapturedDirection& other = *dirs[1 - i];
            std::printf("# %s -> %s: %zu octets%s%s\n", format_endpoint(d.src).c_str(), format_endpoint(d.dst).c_str(),
                        d.bytes.size(), d.gap.empty() ? "" : "; ", d.gap.c_str());
            if (d.bytes.empty()) continue;
            DecodeOptions o = base;
            o.start = opens_mpa_frame(d.bytes) ? StreamStart::mpa : StreamStart::fpdu;
            if (!crc_given && opens_mpa_frame(d.bytes) && opens_mpa_frame(other.bytes)) o.crc = crc;
            o.markers = opens_mpa_frame(other.bytes) && (startup_flags(other.bytes) & 0x80);
            o.markers_known = true;
            int r = decode_stream(d.bytes, o, stdout);
            // A stream the capture cut short ends in a "truncated" error that is the capture's, not the peer's.
            if (r != decode_ok && !d.gap.empty()) {
                std::printf("# (the capture ends here: %s)\n", d.gap.c_str());
                r = decode_ok;
            }
            if (r != decode_ok) rc = r;
        }
    }
    return rc;
}

}  // namespace

void print_decode_usage(bool to_stderr)
{
    std::fputs(
        "usage: iwemu decode [options] FILE|-\n"
        "\n"
        "Decode one direction of an iWARP TCP byte stream (raw octets, from the first\n"
        "octet of the MPA Request or Reply) into one line per MPA frame and FPDU:\n"
        "flags and private data (RFC 6581 enhanced data), then each FPDU's stream\n"
        "offset, ULPDU_Length, CRC verdict, markers, DDP and RDMAP fields.  Stops at\n"
        "the first malformation and prints the Terminate code it implies.\n"
        "A stream opening with a draft-03 Start Key (\"MPA ident frame\", seed 000)\n"
        "is decoded as such, then as version-0 FPDUs.\n"
        "\n"
        "A pcap or pcapng file (a live capture, or one IWEMU_CAPTURE wrote) is\n"
        "read as such: both directions of each chosen TCP connection are put back\n"
        "together and decoded, CRC and markers as the startup frames negotiated.\n"
        "\n"
        "options:\n"
        "  --crc on|off       CRC present and checked in FPDUs (default: the C bit of\n"
        "                     the startup frame seen; on with --start fpdu)\n"
        "  --markers on|off   markers in this direction (default off, on after a\n"
        "                     Start Key; the peer's M bit decides, and it is in the\n"
        "                     other direction)\n"
        "  --start mpa|fpdu   stream begins with an MPA frame (default) or at an FPDU\n"
        "                     boundary in Full Operation\n"
        "  --offset N         stream offset of the first FPDU octet relative to\n"
        "                     SeqStart (marker phase; default 0)\n"
        "  --rfc7306 on|off   accept RFC 7306 opcodes 0x8-0xB (default on)\n"
        "  --qp N             capture: the connection of QP N (IWEMU_CAPTURE notes\n"
        "                     each QP's number on its packets)\n"
        "  --ports P[,P2]     capture: the connections with port P (and P2)\n"
        "  --version 0|1      DDP/RDMAP version of the FPDUs: 0 = RDMA Consortium\n"
        "                     (default: 0 after a Rev 0 startup frame or a Start\n"
        "                     Key, with markers;\n"
        "                     give it with --start fpdu for a Rev 0 stream)\n"
        "  -h, --help         this text\n"
        "\n"
        "exit status: 0 whole stream decoded, 2 malformed or truncated stream,\n"
        "1 usage or I/O error\n",
        to_stderr ? stderr : stdout);
}

int decode_command(int argc, char** argv)
{
    DecodeOptions options;
    ConnectionChoice choice;
    const char* path = nullptr;
    for (int i = 1; i < argc; ++i) {
        const std::string_view a = argv[i];
        auto value = [&](std::string_view& v) {
            if (i + 1 >= argc) {
                std::fprintf(stderr, "iwemu decode: %s needs a value\n", argv[i]);
                return false;
            }
            v = argv[++i];
            return true;
        };
        std::string_view v;
        auto on_off = [&](bool& out) {
            if (value(v) && parse_on_off(v, out))
                return true;
            // a, not argv[i]: value() has moved i on to the value.
            std::fprintf(stderr, "iwemu decode: %.*s takes on or off\n", static_cast<int>(a.size()), a.data());
            return false;
        };
        if (a == "-h" || a == "--help") {
            print_decode_usage(false);
            return 0;
        } else if (a == "--crc") {
            bool b;
            if (!on_off(b))
                return exit_usage;
            options.crc = b;
        } else if (a == "--markers") {
            if (!on_off(options.markers))
                return exit_usage;
            options.markers_known = true;
        } else if (a == "--version") {
            if (!value(v) || (v != "0" && v != "1")) {
                std::fprintf(stderr, "iwemu decode: --version takes 0 or 1\n");
                return exit_usage;
            }
            options.version = static_cast<uint8_t>(v[0] - '0');
        } else if (a == "--rfc7306") {
            if (!on_off(options.rfc7306))
                return exit_usage;
        } else if (a == "--start") {
            if (!value(v))
                return exit_usage;
            if (v == "mpa") {
                options.start = StreamStart::mpa;
            } else if (v == "fpdu") {
                options.start = StreamStart::fpdu;
            } else {
                std::fputs("iwemu decode: --start takes mpa or fpdu\n", stderr);
                return exit_usage;
            }
        } else if (a == "--offset") {
            if (!value(v) || !parse_u32(v, options.offset)) {
                std::fputs("iwemu decode: --offset takes a number 0..4294967295\n", stderr);
                return exit_usage;
            }
        } else if (a == "--qp") {
            uint32_t q;
            if (!value(v) || !parse_u32(v, q)) {
                std::fputs("iwemu decode: --qp takes a QP number\n", stderr);
                return exit_usage;
            }
            choice.qpn = q;
        } else if (a == "--ports") {
            if (!value(v))
                return exit_usage;
            while (!v.empty()) {
                const size_t comma = v.find(',');
                uint32_t p;
                if (!parse_u32(v.substr(0, comma), p) || p == 0 || p > 65535) {
                    std::fputs("iwemu decode: --ports takes one or two port numbers, comma-separated\n", stderr);
                    return exit_usage;
                }
                choice.ports.push_back(static_cast<uint16_t>(p));
                v = comma == std::string_view::npos ? std::string_view{} : v.substr(comma + 1);
            }
        } else if (a.size() > 1 && a[0] == '-') {
            std::fprintf(stderr, "iwemu decode: unknown option %s\n", argv[i]);
            print_decode_usage(true);
            return exit_usage;
        } else if (path) {
            std::fputs("iwemu decode: one input only\n", stderr);
            return exit_usage;
        } else {
            path = argv[i];
        }
    }
    if (!path) {
        print_decode_usage(true);
        return exit_usage;
    }

    std::vector<uint8_t> data;
    const bool from_stdin = std::string_view(path) == "-";
    std::FILE* f = from_stdin ? stdin : std::fopen(path, "rb");
    if (!f) {
        std::fprintf(stderr, "iwemu decode: %s: %s\n", path, std::strerror(errno));
        return exit_usage;
    }
    const bool ok = read_all(f, data);
    if (!from_stdin)
        std::fclose(f);
    if (!ok) {
        std::fprintf(stderr, "iwemu decode: %s: read error\n", path);
        return exit_usage;
    }
    if (is_capture_file(data)) {
        const int rc = decode_capture(data, choice, options, options.crc.has_value());
        std::fflush(stdout);
        return rc;
    }
    if (choice.qpn || !choice.ports.empty()) {
        std::fputs("iwemu decode: --qp and --ports apply to a pcap or pcapng file\n", stderr);
        return exit_usage;
    }
    const int rc = decode_stream(data, options, stdout);
    std::fflush(stdout);
    return rc;
}

}  // namespace iwemu::tools
