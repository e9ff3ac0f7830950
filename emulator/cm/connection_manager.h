// Connection setup over TCP: listen / connect / accept / reject / disconnect
// with MPA startup (RFC 5044 §7.1, RFC 6581, the seed-002 Rtr mode) and the
// hand-off of the negotiated socket to a QP (emulator/base/connection_params.h).
//
// This is the emulator's iw_cm + the connection half of a provider's CM: the
// rdma_cm emulation (kmod-shim) drives it, a QP receives the socket.
//
// Threading
// - Each ConnectionManager runs one CM thread (epoll, non-blocking sockets)
//   that performs all startup I/O and timeouts.  It starts with the first
//   listen()/connect() and exits by itself once no listener and no connection
//   in startup have remained for half a second; the destructor joins it.
// - Every public method may be called from any thread, including from inside
//   an event handler or an attach callback.  Only the destructor must not be
//   called from a handler.
// - Event handlers and Endpoint callbacks run on the CM thread, one at a time,
//   with no CM lock held.  Events of one connection are delivered in order;
//   after a terminal event (see CmEventType) no further event names the id.
//   Events may arrive before connect() has returned: bind per-connection
//   context through the handler, not through the id.
// - Handlers must not block for long: they delay every other connection's
//   startup.  An exception escaping a handler is swallowed (and escaping
//   attach counts as a refusal): the CM thread never dies of one.
//
// Lifetime of a connection id
//   active:   connect() -> [rejected | connection_refused | unreachable |
//             timeout | connect_error]  or  established -> disconnected
//   passive:  connect_request -> accept() -> established -> disconnected
//                             -> reject()  (id retired, no further event)
//             connect_request -> [timeout | connect_error] (peer vanished or
//             the Rtr frame never came) before/after accept()
//   After established the socket belongs to the QP; the QP (or whoever owns
//   it) reports the end with notify_disconnected(), which delivers the one
//   `disconnected` event.  The id of an established connection stays valid
//   (disconnect() still forwards, e.g. to close our half after the peer's
//   FIN) until destroy(); every other terminal event retires the id itself.
//   destroy() retires an id silently at any time.
#pragma once

#include <sys/socket.h>

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string_view>
#include <vector>

#include "emulator/cm/cm_settings.h"
#include "emulator/base/connection_params.h"
#include "emulator/wire/terminate_codes.h"

namespace iwemu::cm {

using ListenerId = uint64_t;    // 0 is never a valid id
using ConnectionId = uint64_t;  // 0 is never a valid id

// RFC 6581 §9.1: IRD/ORD value meaning "not negotiated here, the ULP decides".
inline constexpr uint16_t ird_ord_not_negotiated = 0x3FFF;
// Largest ULP private data in a Request/Reply: 512 octets in a plain frame,
// 508 when the 4 octets of RFC 6581 enhanced data precede it.  What this end
// sends is further capped by CmSettings::max_sent_pd_length (256 by default,
// for Linux siw); what it receives may always reach these limits.
inline constexpr size_t max_private_data_plain = 512;
inline constexpr size_t max_private_data_enhanced = 508;

enum class CmEventType : uint8_t {
    // Passive: a valid MPA Request arrived on a listener.  Answer with
    // accept() or reject() (no timeout runs while the ULP decides; a peer
    // that goes away meanwhile produces connect_error).
    connect_request,
    // Both: MPA startup finished, Endpoint::attach took the socket.
    // Active: private_data = the Reply's ULP private data.
    established,
    // Active, terminal: the Reply had R=1.  private_data = the Reply's ULP
    // private data; the socket is closed.
    rejected,
    // Active, terminal: TCP connect refused (error = ECONNREFUSED).
    connection_refused,
    // Active, terminal: TCP connect failed otherwise (error = EHOSTUNREACH,
    // ENETUNREACH, ETIMEDOUT, ...).
    unreachable,
    // Terminal: MPA startup (TCP connect included) did not finish within
    // CmSettings::mpa_timeout (error = ETIMEDOUT).
    timeout,
    // Terminal: startup failed: malformed or unexpected frame (mpa_error =
    // LLP/MPA/0x04), no common RTR (0x07), insufficient IRD (0x06), peer
    // closed or reset during startup (error = ECONNRESET), attach refused
    // (error = its errno).
    connect_error,
    // Terminal: an established connection ended (notify_disconnected()).
    disconnected,
};

std::string_view to_string(CmEventType type);

// Result of negotiation, as far as the ULP cares.
struct CmEvent {
    CmEventType type = CmEventType::connect_request;
    ConnectionId connection = 0;
    ListenerId listener = 0;  // connect_request (and later events of passive connections)
    sockaddr_storage local_address{};
    sockaddr_storage peer_address{};
    std::vector<uint8_t> private_data;  // ULP part only (enhanced data stripped)
    uint8_t mpa_revision = 0;           // Rev of the peer's frame
    // connect_request / rejected: the peer's RFC 6581 values as received
    // (ird_ord_not_negotiated when absent, e.g. a Rev 1 frame).
    // established: the values handed to the QP (params.ird / params.ord).
    uint16_t ird = ird_ord_not_negotiated;
    uint16_t ord = ird_ord_not_negotiated;
    bool peer_to_peer = false;  // connect_request: A=1 (or seed-002 S=1) requested
    // connect_request: largest private_data accept()/reject() may carry.
    size_t max_reply_private_data = max_private_data_plain;
    ConnectionParams params;    // established: what the QP got (fd now the QP's)
    int error = 0;              // failures: positive errno
    std::optional<wire::TerminateCode> mpa_error;  // protocol failures (RFC 5044 §8, RFC 6581 §8)
    std::string_view reason;    // failures: short static text for logs
};

using CmEventHandler = std::function<void(const CmEvent&)>;

enum class DisconnectMode : uint8_t {
    graceful,  // flush what is queued, then FIN (shutdown(SHUT_WR))
    abortive,  // RST (SO_LINGER 0), pending work flushed in error
};

// Where a negotiated connection goes: normally a QueuePair.
struct Endpoint {
    // Called on the CM thread when startup completes.  Returns 0 after taking
    // ownership of params.fd (non-blocking, TCP_NODELAY set, positioned at
    // the first FPDU octet: nothing after the startup frames has been read),
    // or a negative errno: the CM then closes the socket and reports
    // connect_error.  In RFC 6581 peer-to-peer mode the QP sends (Initiator)
    // or absorbs (Responder) the RTR itself (params.rtr).
    std::function<int(ConnectionId, const ConnectionParams&)> attach;
    // Optional: how disconnect() reaches an established connection.
    std::function<void(ConnectionId, DisconnectMode)> disconnect;
};

struct ConnectArgs {
    sockaddr_storage remote{};
    std::optional<sockaddr_storage> local;  // bind before connecting (rdma_resolve_addr src)
    // ≤ CmSettings::max_sent_pd_length minus 4 for Rev 2 (252 by default;
    // RFC limit 508) or itself for Rev 1 (256; RFC limit 512).  Copied.
    std::span<const uint8_t> private_data;
    uint16_t ird = 0;  // responder_resources: inbound Reads we allow
    uint16_t ord = 0;  // initiator_depth: outbound Reads we want
    Endpoint endpoint;
    CmEventHandler handler;
};

// Half-open accounting of one listener (diagnostics, tests).
struct ListenerStats {
    unsigned half_open = 0;  // accepted, MPA Request not complete yet
    uint64_t evicted = 0;    // closed at CmSettings::max_half_open_per_listener for a newer one
};

struct AcceptArgs {
    uint16_t ird = 0;  // responder_resources
    uint16_t ord = 0;  // initiator_depth
    std::span<const uint8_t> private_data;  // ≤ CmEvent::max_reply_private_data; copied
    Endpoint endpoint;
    CmEventHandler handler;  // empty: keep the listener's handler
};

class ConnectionManager {
public:
    explicit ConnectionManager(CmSettings settings = {});
    ~ConnectionManager();  // closes every socket still owned here, joins the CM thread
    ConnectionManager(const ConnectionManager&) = delete;
    ConnectionManager& operator=(const ConnectionManager&) = delete;

    const CmSettings& settings() const { return settings_; }

    // Passive side.  Binds and listens (SO_REUSEADDR); `bound` receives the
    // actual address (port 0 picks one).  Returns 0 or a negative errno
    // (-EADDRINUSE, -EINVAL, ...).  A listener keeps at most
    // CmSettings::max_half_open_per_listener connections whose MPA Request
    // is not complete; at the cap each newly accepted connection evicts the
    // oldest of them (closed with RST, no event: the ULP never saw it).
    int listen(const sockaddr* addr, socklen_t addr_len, int backlog, CmEventHandler handler,
               ListenerId* id, sockaddr_storage* bound = nullptr);
    // Stops listening; connections that already delivered connect_request
    // stay valid, those still before it are closed silently.
    int stop_listening(ListenerId id);
    // Answer a connect_request.  Returns 0, -ENOENT (unknown or retired id,
    // e.g. the peer went away and connect_error was delivered), -EINVAL
    // (already answered, no Endpoint::attach, private data too long).
    int accept(ConnectionId id, const AcceptArgs& args);
    // Sends a Reply with R=1 and the private data, then closes; the id is
    // retired (no further event).  Same errors as accept().
    int reject(ConnectionId id, std::span<const uint8_t> private_data);

    // Active side.  Starts a non-blocking TCP connect and the MPA exchange;
    // the outcome comes as an event.  Returns 0 or a negative errno (bad
    // address, private data too long, socket/bind failure).
    int connect(const ConnectArgs& args, ConnectionId* id);

    // Graceful or abortive close.  In startup: the socket is closed here (no
    // event; the id is retired).  Established, before or after
    // `disconnected`: forwarded to Endpoint::disconnect (-ENOTSUP if none);
    // the owner then calls notify_disconnected().  -EBUSY while attach runs.
    int disconnect(ConnectionId id, DisconnectMode mode);
    // The owner of an established connection reports its end (peer FIN/RST,
    // local close, error); delivers `disconnected` once.  error: 0 for an
    // orderly close, else a positive errno.  Any thread, also from inside
    // Endpoint::attach.
    void notify_disconnected(ConnectionId id, int error);
    // Retires an id without further events (rdma_destroy_id); a connection
    // still in startup is closed abortively.
    void destroy(ConnectionId id);

    // 0, -ENOENT for an unknown listener, -EINVAL without `out`.
    int listener_stats(ListenerId id, ListenerStats* out) const;

    // For process exit: sends, from the calling thread, the MPA Replies that
    // accept() and reject() left to the CM thread, as a kernel CM has them
    // on the wire once the call returns (a rejected peer must still get the
    // private data when the process exits right after rdma_reject).  Waits
    // for a full socket until `deadline`; true when nothing was left unsent.
    // Safe from inside a handler, and from an exit() that interrupted a
    // thread holding the CM's lock (it gives up at the deadline).
    bool flush_answers(std::chrono::steady_clock::time_point deadline);

private:
    struct Listener;
    struct Connection;
    class Loop;

    const CmSettings settings_;
    std::unique_ptr<Loop> loop_;
};

}  // namespace iwemu::cm
