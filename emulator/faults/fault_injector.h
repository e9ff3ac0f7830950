// IWEMU_FAULTS at run time: follows each connection's FPDUs in both
// directions (through the socket-call wrappers of emulator/capture, which
// the I/O sites call only when capture or faults are on) and applies the
// rules of fault_rules.h.  Each rule that fires logs one line at info.
#pragma once

#include <sys/socket.h>
#include <sys/types.h>
#include <sys/uio.h>

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
// Octets received on fd (rules with dir=rx).
void received(int fd, const iovec* iov, size_t iovcnt, size_t n, uint32_t qpn);

}  // namespace iwemu::faults
