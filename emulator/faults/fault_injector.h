// IWEMU_FAULTS at run time: follows each connection's FPDUs in both
// directions (through the socket-call wrappers of emulator/capture, which
// the I/O sites call only when capture or faults are on) and applies the
// rules of fault_rules.h.  Each rule that fires logs one line at info.
#pragma once

#include <sys/socket.h>
#include <sys/types.h>
#include <sys/uio.h>

#include <chrono>
#include <cstdint>
#include <optional>
#include <span>
#include <string>

namespace iwemu::faults {

// Parse the rules and turn injection on; false (the reason and position on
// stderr) for a setting that does not parse.  Prints the seed in use.
bool start(const std::string& setting);
bool active();

// A connection was established on fd.
void begin(int fd);
// Send msg on fd as the rules want it sent: unchanged, with a corrupted CRC
// (then *sent points at the octets that really left), cut short before an
// FPDU a drop or Terminate replaces, or not at all (-1, errno ECONNRESET or
// EPIPE) once the connection is dropped.
// What a rule put on the wire beyond the caller's octets, for the capture.
struct Injected {
    std::span<const uint8_t> octets;  // a Terminate
    bool fin = false, rst = false;
    std::optional<size_t> sent_octets;  // of *sent, when not the return value (a lost FPDU left out)
};
ssize_t sendmsg(int fd, const msghdr* msg, int flags, uint32_t qpn, const iovec** sent, size_t* sent_count,
                Injected* injected);
// fd is being closed.
void forget(int fd);
// Receive on fd as the rules want: with a delay, stall or late_read rule a
// QP's read (qpn != 0) ends at the next FPDU's header, which decides, and
// while a fired one holds the socket nothing is read (-1, EAGAIN).
ssize_t recvmsg(int fd, msghdr* msg, int flags, uint32_t qpn);
// Until when a fired delay / stall / late_read keeps fd unread (none: read
// on).  The receive path parks its QP on the engine's timer until then.
std::optional<std::chrono::steady_clock::time_point> rx_hold_until(int fd);
// The peer ended the stream during a hold: read on now.
void rx_hold_release(int fd);
// The passive side received an MPA Request on fd: the private data of the
// MPA Reject a reject rule answers it with, or none (the ULP decides).
std::optional<std::string> reject_request(int fd);

// The number of times rule i (in RuleSet order) fired in this process
// since start(); 0 for an index out of range or with no rules.  Read-only,
// any thread (relaxed counters): for `iwemu status`.
uint64_t fired_count(size_t rule_index);
size_t rule_count();
// The rule as written (empty for an index out of range).
std::string rule_text(size_t rule_index);

}  // namespace iwemu::faults
