// Reads the status segments of every iwemu process of this user
// (status_segment.h): what `iwemu status` prints and what the shim's RDMA
// netlink answers merge.  Files of dead processes (or of a reused pid) are
// skipped and, when asked, removed.
#pragma once

#include <sys/socket.h>

#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace iwemu {

// A copy of QpCounters (qp_counters.h), taken with relaxed loads.
struct CounterValues {
    uint64_t tx_fpdus = 0, tx_bytes = 0, rx_fpdus = 0, rx_bytes = 0;
    uint64_t rnr_waits = 0, crc_errors = 0;
    uint64_t terminates_sent[3] = {}, terminates_received[3] = {};  // RDMAP, DDP, LLP
    uint64_t read_requests = 0, reads_done = 0, reads_over_ird = 0;
    uint64_t faults_fired = 0;
    uint64_t tcp_retransmits = 0;  // TCP_INFO total_retrans, when looked up (not in the segment)
    uint64_t reads_in_flight() const { return read_requests > reads_done ? read_requests - reads_done : 0; }
    CounterValues& operator+=(const CounterValues& o);
};

struct QpCounters;
CounterValues counter_values(const QpCounters& c);

struct QpStatus {
    uint32_t qp_num = 0;
    uint8_t state = 0;  // QpState (== ib_qp_state)
    sockaddr_storage local{}, peer{};  // ss_family 0: not connected
    CounterValues counters;
    std::optional<uint32_t> tcp_retransmits;  // TCP_INFO's total_retrans, when asked and found
};

struct ProcessStatus {
    uint32_t pid = 0;
    std::string comm;
    std::string device;
    std::vector<QpStatus> qps;  // by QP number
    CounterValues retired;      // the process's destroyed QPs
};

struct StatusReadOptions {
    bool remove_stale = true;   // unlink files of dead processes
    bool tcp_info = false;      // look up each connected QP's TCP retransmits (sock_diag)
};

// Every live process's status, by pid.  dir "": status_directory(false).
std::vector<ProcessStatus> read_process_status(const StatusReadOptions& opt = {}, const std::string& dir = "");

// TCP_INFO's tcpi_total_retrans of the TCP socket local <-> peer, through
// NETLINK_SOCK_DIAG (another process's socket cannot be asked directly).
std::optional<uint32_t> tcp_retransmits(const sockaddr_storage& local, const sockaddr_storage& peer);

// The hw counters of a port or a QP as `rdma statistic show` prints them
// and as the sysfs tree's ports/1/hw_counters/ names its files.
std::vector<std::pair<std::string, uint64_t>> hw_counter_list(const CounterValues& c);

// "a.b.c.d:port" / "[v6]:port"; "-" when unset.
std::string format_endpoint(const sockaddr_storage& a);

}  // namespace iwemu
