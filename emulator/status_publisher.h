// The writer side of the status segment (status_segment.h): this process's
// file, created when its first QP is, removed at exit.  A QP claims a slot
// at creation and gives it back when its memory goes; between those it
// writes its counters and state into the slot itself.
#pragma once

#include <cstdint>
#include <memory>
#include <mutex>

#include "emulator/status/status_segment.h"

namespace iwemu {

class StatusPublisher {
public:
    static StatusPublisher& instance();  // never destroyed: QPs may outlive static destructors

    // A zeroed slot for QP qp_num, or nullptr (no private directory, table full).
    QpStatusSlot* claim(uint32_t qp_num);
    // Folds the slot's counters into the header's retired sums and frees it.
    void release(QpStatusSlot* slot);
    // A fault-injection rule fired on QP qp_num (emulator/faults: rare, off
    // the data path, so a search of the live slots is fine).
    void count_fault(uint32_t qp_num);
    // Removes this process's file (atexit).
    void remove_file();

private:
    bool open_locked();
    std::mutex lock_;
    StatusHeader* header_ = nullptr;
    QpStatusSlot* slots_ = nullptr;
    uint32_t pid_ = 0;      // the process the mapping was made for (fork: a child makes its own)
    bool failed_ = false;   // no directory: stop trying
    std::string path_;
};

// What a QP holds: a published slot when there is one, else a private one.
class PublishedQp {
public:
    explicit PublishedQp(uint32_t qp_num);
    ~PublishedQp();
    PublishedQp(const PublishedQp&) = delete;
    PublishedQp& operator=(const PublishedQp&) = delete;
    QpStatusSlot& slot() { return *slot_; }
    const QpStatusSlot& slot() const { return *slot_; }
    bool published() const { return !own_; }

private:
    std::unique_ptr<QpStatusSlot> own_;
    QpStatusSlot* slot_;
};

}  // namespace iwemu
