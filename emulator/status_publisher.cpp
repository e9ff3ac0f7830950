#include "emulator/status_publisher.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <new>

#include "emulator/base/log.h"

namespace iwemu {

StatusPublisher& StatusPublisher::instance()
{
    static auto* p = [] {
        auto* s = new StatusPublisher;
        std::atexit([] { StatusPublisher::instance().remove_file(); });
        return s;
    }();
    return *p;
}

bool StatusPublisher::open_locked()
{
    const auto pid = static_cast<uint32_t>(getpid());
    if (header_ && pid_ == pid) return true;
    if (failed_ && pid_ == pid) return false;
    // First use, or a fork()ed child: the parent's mapping stays the parent's.
    header_ = nullptr;
    slots_ = nullptr;
    pid_ = pid;
    failed_ = true;
    std::string error;
    const std::string dir = status_directory(true, &error);
    if (dir.empty()) {
        IWEMU_LOG(info, "status segment not published: %s", error.c_str());
        return false;
    }
    path_ = dir + "/" + std::to_string(pid) + ".shm";
    unlink(path_.c_str());  // a dead process's file with our pid
    const int fd = open(path_.c_str(), O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, 0600);
    if (fd < 0) {
        IWEMU_LOG(info, "status segment not published: %s: %s", path_.c_str(), std::strerror(errno));
        return false;
    }
    void* m = MAP_FAILED;
    if (ftruncate(fd, static_cast<off_t>(kStatusFileSize)) == 0)
        m = mmap(nullptr, kStatusFileSize, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    close(fd);
    if (m == MAP_FAILED) {
        unlink(path_.c_str());
        return false;
    }
    // The file is zero-filled: the objects below start at their zero values.
    auto* h = new (m) StatusHeader;
    h->pid = pid;
    h->start_time = process_start_time(pid);
    if (int c = open("/proc/self/comm", O_RDONLY | O_CLOEXEC); c >= 0) {
        const ssize_t n = read(c, h->comm, sizeof h->comm - 1);
        if (n > 0 && h->comm[n - 1] == '\n') h->comm[n - 1] = '\0';
        close(c);
    }
    std::strncpy(h->device, "iwemu0", sizeof h->device - 1);
    slots_ = reinterpret_cast<QpStatusSlot*>(static_cast<char*>(m) + sizeof(StatusHeader));
    h->magic.store(kStatusMagic, std::memory_order_release);
    header_ = h;
    failed_ = false;
    return true;
}

QpStatusSlot* StatusPublisher::claim(uint32_t qp_num)
{
    std::lock_guard g(lock_);
    if (!open_locked()) return nullptr;
    // The lowest free slot: the pages touched follow the QPs alive at once,
    // not all QPs ever made (a round-robin search touched the whole table
    // over a connection churn: RSS +1 MB).  A reused slot's generation
    // tells readers it is another QP.
    for (uint32_t k = 0; k < kStatusSlots; ++k) {
        QpStatusSlot* s = &slots_[k];
        if (!(s->generation.load(std::memory_order_relaxed) & 1)) {
            if (s->generation.load(std::memory_order_relaxed) == 0) new (s) QpStatusSlot;  // first use of this slot
            s->qp_num.store(qp_num, std::memory_order_relaxed);
            s->state.store(QpState::init, std::memory_order_relaxed);
            s->local.store(sockaddr_storage{});
            s->peer.store(sockaddr_storage{});
            QpCounters& c = s->counters;
            for (auto* a : {&c.tx_fpdus, &c.tx_bytes, &c.rx_fpdus, &c.rx_bytes, &c.tx_syscalls, &c.rx_syscalls,
                            &c.rx_copied_bytes, &c.rx_rnr_waits, &c.rx_engine_passes, &c.rx_poll_lease_lapses,
                            &c.fin_stall_drops, &c.rx_post_assists, &c.tx_wakeups, &c.rx_crc_errors,
                            &c.rx_read_requests, &c.tx_read_responses, &c.rx_reads_over_ird, &c.faults_fired})
                a->store(0, std::memory_order_relaxed);
            for (int l = 0; l < 3; ++l) {
                c.terminates_sent[l].store(0, std::memory_order_relaxed);
                c.terminates_received[l].store(0, std::memory_order_relaxed);
            }
            s->generation.fetch_add(1, std::memory_order_release);  // odd: live
            return s;
        }
    }
    return nullptr;
}

void StatusPublisher::count_fault(uint32_t qp_num)
{
    std::lock_guard g(lock_);
    if (!header_ || pid_ != static_cast<uint32_t>(getpid())) return;
    for (uint32_t i = 0; i < kStatusSlots; ++i) {
        QpStatusSlot& s = slots_[i];
        if ((s.generation.load(std::memory_order_relaxed) & 1) && s.qp_num.load(std::memory_order_relaxed) == qp_num) {
            s.counters.faults_fired.fetch_add(1, std::memory_order_relaxed);
            return;
        }
    }
}

void StatusPublisher::release(QpStatusSlot* slot)
{
    std::lock_guard g(lock_);
    // A slot of the parent's mapping (after fork) or of none: nothing to do.
    if (!header_ || pid_ != static_cast<uint32_t>(getpid()) || slot < slots_ || slot >= slots_ + kStatusSlots) return;
    const QpCounters& c = slot->counters;
    QpCounters& r = header_->retired;
    const auto add = [](std::atomic<uint64_t>& to, const std::atomic<uint64_t>& from) {
        to.store(to.load(std::memory_order_relaxed) + from.load(std::memory_order_relaxed), std::memory_order_relaxed);
    };
    add(r.tx_fpdus, c.tx_fpdus);
    add(r.tx_bytes, c.tx_bytes);
    add(r.rx_fpdus, c.rx_fpdus);
    add(r.rx_bytes, c.rx_bytes);
    add(r.rx_rnr_waits, c.rx_rnr_waits);
    add(r.rx_crc_errors, c.rx_crc_errors);
    add(r.rx_read_requests, c.rx_read_requests);
    add(r.tx_read_responses, c.tx_read_responses);
    add(r.rx_reads_over_ird, c.rx_reads_over_ird);
    add(r.faults_fired, c.faults_fired);
    for (int l = 0; l < 3; ++l) {
        add(r.terminates_sent[l], c.terminates_sent[l]);
        add(r.terminates_received[l], c.terminates_received[l]);
    }
    slot->generation.fetch_add(1, std::memory_order_release);  // even: free
}

void StatusPublisher::remove_file()
{
    std::lock_guard g(lock_);
    if (header_ && pid_ == static_cast<uint32_t>(getpid())) unlink(path_.c_str());
}

PublishedQp::PublishedQp(uint32_t qp_num) : slot_(StatusPublisher::instance().claim(qp_num))
{
    if (!slot_) {
        own_ = std::make_unique<QpStatusSlot>();
        own_->qp_num.store(qp_num, std::memory_order_relaxed);
        own_->state.store(QpState::init, std::memory_order_relaxed);
        slot_ = own_.get();
    }
}

PublishedQp::~PublishedQp()
{
    if (!own_) StatusPublisher::instance().release(slot_);
}

}  // namespace iwemu
