// Thin TCP socket helpers for connection setup and teardown: non-blocking
// listen/connect, addresses, MSS, and the two ways to close.  Every function
// reports failure as a negative errno and never throws.
#pragma once

#include <sys/socket.h>

#include <cstddef>
#include <cstdint>
#include <optional>

namespace iwemu::cm {

// Length of the sockaddr in `addr` by family (0 for an unsupported family).
socklen_t sockaddr_length(const sockaddr_storage& addr);

// Non-blocking, close-on-exec listening socket bound to addr (SO_REUSEADDR).
// Returns the fd or a negative errno; *bound receives the bound address.
int open_listener(const sockaddr* addr, socklen_t addr_len, int backlog, sockaddr_storage* bound);

// Non-blocking connect: returns the fd (connection pending or done) and sets
// *connect_errno to 0, EINPROGRESS or the errno connect() reported for a
// network outcome (ECONNREFUSED, ENETUNREACH, ...).  Returns a negative errno
// when no socket could be set up (bad family, bind failure).
int start_connect(const sockaddr_storage& remote, const std::optional<sockaddr_storage>& local,
                  int* connect_errno);

// "a.b.c.d:port" / "[v6]:port" into out (for logs); returns out.
const char* format_address(const sockaddr_storage& addr, char* out, size_t size);

// Pending error of a socket (SO_ERROR), 0 if none.
int socket_error(int fd);

void set_nodelay(int fd);
void local_address(int fd, sockaddr_storage* out);
void peer_address(int fd, sockaddr_storage* out);

// Effective MSS of a connected socket (TCP_MAXSEG), 536 if unknown.
uint32_t effective_mss(int fd);

// Orderly close: FIN after whatever is queued (RFC 5044 §7.2).
void close_graceful(int fd);
// Abortive close: RST now (SO_LINGER 0), queued data discarded.
void close_abortive(int fd);

}  // namespace iwemu::cm
