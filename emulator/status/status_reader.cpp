#include "emulator/status/status_reader.h"

#include <arpa/inet.h>
#include <dirent.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>

#include "emulator/status/status_segment.h"

namespace iwemu {

CounterValues& CounterValues::operator+=(const CounterValues& o)
{
    tx_fpdus += o.tx_fpdus;
    tx_bytes += o.tx_bytes;
    rx_fpdus += o.rx_fpdus;
    rx_bytes += o.rx_bytes;
    rnr_waits += o.rnr_waits;
    crc_errors += o.crc_errors;
    for (int l = 0; l < 3; ++l) {
        terminates_sent[l] += o.terminates_sent[l];
        terminates_received[l] += o.terminates_received[l];
    }
    read_requests += o.read_requests;
    reads_done += o.reads_done;
    reads_over_ird += o.reads_over_ird;
    faults_fired += o.faults_fired;
    tcp_retransmits += o.tcp_retransmits;
    return *this;
}

CounterValues counter_values(const QpCounters& c)
{
    constexpr auto r = std::memory_order_relaxed;
    CounterValues v;
    v.tx_fpdus = c.tx_fpdus.load(r);
    v.tx_bytes = c.tx_bytes.load(r);
    v.rx_fpdus = c.rx_fpdus.load(r);
    v.rx_bytes = c.rx_bytes.load(r);
    v.rnr_waits = c.rx_rnr_waits.load(r);
    v.crc_errors = c.rx_crc_errors.load(r);
    for (int l = 0; l < 3; ++l) {
        v.terminates_sent[l] = c.terminates_sent[l].load(r);
        v.terminates_received[l] = c.terminates_received[l].load(r);
    }
    v.read_requests = c.rx_read_requests.load(r);
    v.reads_done = c.tx_read_responses.load(r);
    v.reads_over_ird = c.rx_reads_over_ird.load(r);
    v.faults_fired = c.faults_fired.load(r);
    return v;
}

std::vector<std::pair<std::string, uint64_t>> hw_counter_list(const CounterValues& c)
{
    // rxe's names where rxe has the counter (sent_pkts, rcvd_pkts); the rest
    // in the same style, for what only an iWARP RNIC has.
    return {
        {"sent_pkts", c.tx_fpdus},
        {"rcvd_pkts", c.rx_fpdus},
        {"sent_bytes", c.tx_bytes},
        {"rcvd_bytes", c.rx_bytes},
        {"rcvd_crc_err", c.crc_errors},
        {"sent_term_rdmap", c.terminates_sent[0]},
        {"sent_term_ddp", c.terminates_sent[1]},
        {"sent_term_mpa", c.terminates_sent[2]},
        {"rcvd_term_rdmap", c.terminates_received[0]},
        {"rcvd_term_ddp", c.terminates_received[1]},
        {"rcvd_term_mpa", c.terminates_received[2]},
        {"rnr_waits", c.rnr_waits},
        {"rcvd_read_reqs", c.read_requests},
        {"read_reqs_in_flight", c.reads_in_flight()},
        {"read_reqs_over_ird", c.reads_over_ird},
        {"tcp_retransmits", c.tcp_retransmits},
        {"faults_fired", c.faults_fired},
    };
}

namespace {

bool process_alive(uint32_t pid, uint64_t start_time)
{
    if (kill(static_cast<pid_t>(pid), 0) != 0 && errno == ESRCH) return false;
    const uint64_t now = process_start_time(pid);
    return now == 0 || start_time == 0 || now == start_time;  // unreadable /proc: trust kill()
}

// One file; false: not (or no longer) a live process's segment.
bool read_one(const std::string& path, uint32_t pid, const StatusReadOptions& opt, ProcessStatus* out, bool* stale)
{
    *stale = false;
    const int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
    if (fd < 0) return false;
    struct stat st {};
    void* m = MAP_FAILED;
    if (fstat(fd, &st) == 0 && st.st_uid == getuid() && static_cast<size_t>(st.st_size) == kStatusFileSize)
        m = mmap(nullptr, kStatusFileSize, PROT_READ, MAP_SHARED, fd, 0);
    close(fd);
    if (m == MAP_FAILED) {
        // Being created (size 0) unless its process is gone.
        *stale = kill(static_cast<pid_t>(pid), 0) != 0 && errno == ESRCH;
        return false;
    }
    const auto* h = static_cast<const StatusHeader*>(m);
    bool ok = false;
    if (h->magic.load(std::memory_order_acquire) != kStatusMagic) {
        *stale = kill(static_cast<pid_t>(pid), 0) != 0 && errno == ESRCH;
    } else if (h->version != kStatusVersion || h->header_size != sizeof(StatusHeader) ||
               h->slot_size != sizeof(QpStatusSlot) || h->slot_count != kStatusSlots || h->pid != pid) {
        // Another build's layout or a misnamed file: not ours to interpret,
        // nor to remove while the process it names runs.
        *stale = kill(static_cast<pid_t>(pid), 0) != 0 && errno == ESRCH;
    } else if (!process_alive(pid, h->start_time)) {
        *stale = true;
    } else {
        ok = true;
        out->pid = pid;
        out->comm.assign(h->comm, strnlen(h->comm, sizeof h->comm));
        out->device.assign(h->device, strnlen(h->device, sizeof h->device));
        out->retired = counter_values(h->retired);
        const auto* slots = reinterpret_cast<const QpStatusSlot*>(static_cast<const char*>(m) + sizeof(StatusHeader));
        for (uint32_t i = 0; i < kStatusSlots; ++i) {
            const QpStatusSlot& s = slots[i];
            const uint32_t g = s.generation.load(std::memory_order_acquire);
            if (!(g & 1)) continue;
            QpStatus q;
            q.qp_num = s.qp_num.load(std::memory_order_relaxed);
            q.state = static_cast<uint8_t>(s.state.load(std::memory_order_relaxed));
            q.local = s.local.load();
            q.peer = s.peer.load();
            q.counters = counter_values(s.counters);
            std::atomic_thread_fence(std::memory_order_acquire);
            if (s.generation.load(std::memory_order_relaxed) != g) continue;  // reassigned meanwhile
            if (opt.tcp_info && q.local.ss_family && q.peer.ss_family) {
                q.tcp_retransmits = tcp_retransmits(q.local, q.peer);
                q.counters.tcp_retransmits = q.tcp_retransmits.value_or(0);
            }
            out->qps.push_back(q);
        }
        std::sort(out->qps.begin(), out->qps.end(), [](auto& a, auto& b) { return a.qp_num < b.qp_num; });
    }
    munmap(m, kStatusFileSize);
    return ok;
}

}  // namespace

std::vector<ProcessStatus> read_process_status(const StatusReadOptions& opt, const std::string& dir_in)
{
    std::vector<ProcessStatus> out;
    std::string error;
    const std::string dir = dir_in.empty() ? status_directory(false, &error) : dir_in;
    if (dir.empty()) return out;
    DIR* d = opendir(dir.c_str());
    if (!d) return out;
    while (const dirent* e = readdir(d)) {
        char* end = nullptr;
        const unsigned long pid = std::strtoul(e->d_name, &end, 10);
        if (pid == 0 || pid > UINT32_MAX || std::strcmp(end, ".shm") != 0) continue;
        const std::string path = dir + "/" + e->d_name;
        ProcessStatus p;
        bool stale = false;
        if (read_one(path, static_cast<uint32_t>(pid), opt, &p, &stale))
            out.push_back(std::move(p));
        else if (stale && opt.remove_stale)
            unlink(path.c_str());
    }
    closedir(d);
    std::sort(out.begin(), out.end(), [](auto& a, auto& b) { return a.pid < b.pid; });
    return out;
}

std::string format_endpoint(const sockaddr_storage& a)
{
    char buf[INET6_ADDRSTRLEN] = {};
    if (a.ss_family == AF_INET) {
        const auto& in = reinterpret_cast<const sockaddr_in&>(a);
        inet_ntop(AF_INET, &in.sin_addr, buf, sizeof buf);
        return std::string(buf) + ":" + std::to_string(ntohs(in.sin_port));
    }
    if (a.ss_family == AF_INET6) {
        const auto& in6 = reinterpret_cast<const sockaddr_in6&>(a);
        inet_ntop(AF_INET6, &in6.sin6_addr, buf, sizeof buf);
        return "[" + std::string(buf) + "]:" + std::to_string(ntohs(in6.sin6_port));
    }
    return "-";
}

}  // namespace iwemu
