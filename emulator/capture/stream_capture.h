// IWEMU_CAPTURE: every QP's TCP byte stream, both directions, written as a
// pcapng file with synthesized Ethernet/IP/TCP headers (real addresses and
// ports, sequence numbers that follow the stream, wall-clock timestamps), so
// Wireshark decodes MPA/DDP/RDMAP as in a live capture: no root, no
// interface.  docs/configuration.md, docs/testing-your-application.md.
//
// The socket I/O sites call the wrappers below instead of the system calls
// when on() is true: a wrapper holds the capture's lock across the
// (non-blocking) call and the recording, so what the file shows in one
// direction precedes, as it did on the wire, what it caused in the other.
// With capture off, each site costs one load and one not-taken branch.
#pragma once

#include <sys/socket.h>
#include <sys/types.h>

#include <cstdint>
#include <string>
#include <string_view>

namespace iwemu::capture {

struct Settings {
    std::string path;                        // "" = off; %p = process id, %% = %
    uint32_t snaplen = 262144;               // octets of a frame kept (Wireshark's default)
    uint32_t payload_keep = UINT32_MAX;      // payload octets kept per FPDU after its headers
    uint64_t max_file_bytes = 0;             // rotate at this size (0: never)
    uint32_t files = 2;                      // files kept when rotating (the current one included)
};

// Whether a capture path is acceptable: "" or an error message.
std::string check_path(std::string_view path);

// The path with %p and %% replaced.
std::string expand_path(std::string_view path, long pid);

// Set once, before the first connection, by start(); read by every I/O site.
extern bool g_on;
inline bool on() { return __builtin_expect(g_on, false); }

// Open the file and turn capture on.  False (with the reason on stderr) if
// the file cannot be created: the application runs on, uncaptured.
bool start(const Settings& settings);

// Route the socket calls through the wrappers without capturing (for
// fault injection, emulator/faults/fault_injector.h).
void hooks_on();

// A TCP connection was established on fd (active: we connected).  Writes
// the synthesized handshake; a flow left on fd from an earlier connection
// is closed first.
void begin(int fd, bool active);

// The wrapped socket calls.  qpn: the QP doing the I/O (0: the connection
// manager), noted in the capture as a packet comment "iwemu qp=N".
ssize_t sendmsg(int fd, const msghdr* msg, int flags, uint32_t qpn);
ssize_t send(int fd, const void* buf, size_t len, int flags);
ssize_t recvmsg(int fd, msghdr* msg, int flags, uint32_t qpn);
ssize_t recv(int fd, void* buf, size_t len, int flags, uint32_t qpn);

// Our FIN is about to leave (shutdown(SHUT_WR)), or the socket is about to
// be closed (abortive: with an RST).
void shutdown_wr(int fd);
void closing(int fd, bool abortive);

}  // namespace iwemu::capture
