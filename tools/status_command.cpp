#include "tools/status_command.h"

#include <cinttypes>
#include <cstdio>
#include <cstring>
#include <map>
#include <string>

#include "emulator/status/status_reader.h"

namespace iwemu::tools {
namespace {

const char* state_name(uint8_t s)
{
    static const char* const names[] = {"RESET", "INIT", "RTR", "RTS", "SQD", "SQE", "ERR"};
    return s < 7 ? names[s] : "?";
}

void print_counters(const CounterValues& c, const char* indent)
{
    std::printf("%stx %" PRIu64 " FPDUs %" PRIu64 " B  rx %" PRIu64 " FPDUs %" PRIu64 " B\n", indent, c.tx_fpdus,
                c.tx_bytes, c.rx_fpdus, c.rx_bytes);
    std::printf("%sterminates sent RDMAP/DDP/MPA %" PRIu64 "/%" PRIu64 "/%" PRIu64 "  received %" PRIu64 "/%" PRIu64
                "/%" PRIu64 "  CRC errors %" PRIu64 "  RNR waits %" PRIu64 "\n",
                indent, c.terminates_sent[0], c.terminates_sent[1], c.terminates_sent[2], c.terminates_received[0],
                c.terminates_received[1], c.terminates_received[2], c.crc_errors, c.rnr_waits);
    std::printf("%sread requests %" PRIu64 " (in flight %" PRIu64 ", over IRD %" PRIu64 ")  faults fired %" PRIu64 "\n",
                indent, c.read_requests, c.reads_in_flight(), c.reads_over_ird, c.faults_fired);
}

void usage(std::FILE* out)
{
    std::fputs("usage: iwemu status [--no-tcp]\n"
               "\n"
               "Shows every process of this user that uses iwemu: its device, its QPs with\n"
               "state, addresses and counters (FPDUs and octets each way, Terminates by\n"
               "layer, CRC errors, RNR waits, inbound Read Requests, TCP retransmits).\n"
               "  --no-tcp   do not ask the kernel for each connection's TCP retransmits\n",
               out);
}

}  // namespace

int status_command(int argc, char** argv)
{
    StatusReadOptions opt;
    opt.tcp_info = true;
    for (int i = 1; i < argc; ++i) {
        if (!std::strcmp(argv[i], "--no-tcp")) {
            opt.tcp_info = false;
        } else if (!std::strcmp(argv[i], "-h") || !std::strcmp(argv[i], "--help")) {
            usage(stdout);
            return 0;
        } else {
            std::fprintf(stderr, "iwemu status: unknown option '%s'\n", argv[i]);
            usage(stderr);
            return 1;
        }
    }
    const std::vector<ProcessStatus> procs = read_process_status(opt);
    // Devices: each one's port counters are the sums over its processes (live QPs and destroyed ones).
    std::map<std::string, std::pair<CounterValues, size_t>> devices;
    for (const ProcessStatus& p : procs) {
        auto& [sum, qps] = devices[p.device];
        sum += p.retired;
        for (const QpStatus& q : p.qps) sum += q.counters;
        qps += p.qps.size();
    }
    if (devices.empty()) devices["iwemu0"] = {};
    std::printf("devices:\n");
    for (const auto& [name, d] : devices) {
        std::printf("  %s port 1: %zu QPs\n", name.c_str(), d.second);
        print_counters(d.first, "    ");
    }
    std::printf("processes: %zu\n", procs.size());
    for (const ProcessStatus& p : procs) {
        std::printf("  pid %" PRIu32 " %s on %s: %zu QPs\n", p.pid, p.comm.c_str(), p.device.c_str(), p.qps.size());
        for (const QpStatus& q : p.qps) {
            std::printf("    qp %" PRIu32 " %s local %s peer %s", q.qp_num, state_name(q.state),
                        format_endpoint(q.local).c_str(), format_endpoint(q.peer).c_str());
            if (q.tcp_retransmits) std::printf(" tcp retransmits %" PRIu32, *q.tcp_retransmits);
            std::printf("\n");
            print_counters(q.counters, "      ");
        }
    }
    return 0;
}

}  // namespace iwemu::tools
