// Emulator settings: built-in defaults, then an optional config file, then
// IWEMU_* environment variables (the environment wins).  Documented in
// docs/configuration.md.  Read once, when the emulator instance is created.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "emulator/capture/stream_capture.h"
#include "emulator/base/connection_params.h"
#include "emulator/base/log.h"

namespace iwemu {

// Bounds of Config::rx_lookahead: the least a payload read takes beyond its
// FPDU (room for the next FPDU's header) and the staging buffer's size.
inline constexpr uint32_t rx_lookahead_min = 512;
inline constexpr uint32_t rx_lookahead_max = 65536;


// Whether the engine thread spins a while after work instead of sleeping in
// epoll_wait at once.  idle_app: only while no application thread has made a
// data-path verbs call for a while (the application sleeps elsewhere, so the
// engine spinning costs nobody a core, and it saves an idle-core wake-up per
// message).
enum class BusyPoll : uint8_t { off, on, idle_app };

struct Config {
    // MPA (RFC 5044 / 6581): what our Request/Reply asks for.
    bool crc = true;                 // IWEMU_CRC: C bit (RFC default 1); 0 only by explicit choice
    bool markers = false;            // IWEMU_MARKERS: M bit (ask the peer to send markers)
    uint8_t mpa_revision = 2;        // IWEMU_MPA_REV: 1 or 2, or 0 (RDMA Consortium, RFC 5044 App. C)
    // IWEMU_MPA_REV0: a peer's Rev 0 (RDMA Consortium) Request or Reply is
    // served permissively (DDP/RDMAP version 0, markers and CRC on: RFC 5044
    // Appendix C); off = non-permissive (Rev 1 Reply with R=1, then close).
    bool mpa_rev0_accept = true;
    // IWEMU_MPA_STARTUP: how an rdma_cm Initiator starts MPA: "frames"
    // (RFC 5044 Request/Reply, per mpa_rev) or "startkey" (seed 000,
    // draft-03: a Start Key, DDP/RDMAP version 0, no Private Data).
    bool mpa_start_key = false;
    bool peer_to_peer = true;        // IWEMU_P2P: RFC 6581 A bit
    // IWEMU_RTR: RTR types offered, in preference order (read, write, send).
    // Read first: its Response tells the Initiator that the peer reads its
    // stream (first_fpdus.cpp), and it is cxgb4's default.
    std::string rtr_types = "read,write";
    // IWEMU_RESPONDER_WAIT_MS: in client/server mode a Responder holds its
    // FPDUs this long for the Initiator's first (RFC 5044 §7.1.2 rule 4),
    // then sends anyway (docs/interop.md).
    uint32_t responder_wait_ms = 50;
    // IWEMU_CLOSE_GRACE_MS: a graceful close's FIN waits this long after the
    // peer's last message (Linux siw fails a Send it has sent when our FIN
    // comes first; fin_grace.cpp).  0: at once.
    uint32_t close_grace_ms = 50;
    // IWEMU_PEER_WAKEUP: zero-length Writes after the first FPDUs wake a
    // peer whose receive callback missed them (Linux siw; first_fpdus.cpp).
    bool peer_wakeup = true;
    bool seed_rtr_frame = false;     // IWEMU_SEED_RTR: seed-002 Rtr-frame mode (iwemu peers only)
    uint32_t mpa_timeout_ms = 10000; // IWEMU_MPA_TIMEOUT_MS: startup / RTR wait
    // IWEMU_CONNECT_RETRIES: reconnects of a connect whose peer closed or
    // reset it before any octet of its MPA Reply (a port forwarder for a
    // server not listening yet); 0: fail at once, as kernel iw_cm.
    uint32_t connect_retries = 10;
    uint32_t oob_timeout_ms = 10000; // IWEMU_OOB_TIMEOUT_MS: modify_qp(RTR)-connected QPs: refused connects retried this long
    // IWEMU_RNR_WAIT_MS: a Send that finds no receive posted stalls the
    // stream (TCP back-pressure) this long for one, then Terminates; 0 = at
    // once, as Linux siw.  See docs/configuration.md for the default.
    uint32_t rnr_wait_ms = 3000;
    // IWEMU_MAX_HALF_OPEN: connections a listener keeps before their MPA
    // Request is complete; at the cap the oldest makes way for a new one.
    uint32_t max_half_open = 64;
    uint16_t ird = 128;              // IWEMU_IRD: default inbound Read queue depth
    uint16_t ord = 128;              // IWEMU_ORD: default outbound Read depth
    bool rfc7306 = true;             // IWEMU_RFC7306: Immediate Data (Write with Immediate) and atomics sent and accepted
    // Engine
    BusyPoll busy_poll = BusyPoll::idle_app;  // IWEMU_BUSY_POLL: 0 | 1 | auto
    uint32_t busy_poll_us = 50;      // IWEMU_BUSY_POLL_US: spin budget before sleeping in epoll
    bool rx_progress_on_poll = true; // IWEMU_POLL_PROGRESS: poll_cq also runs the receive path
    bool poll_owns_rx = true;        // IWEMU_POLL_OWNS_RX: a busy-polling thread takes EPOLLIN from the engine
    bool event_waiter_receives = true;  // IWEMU_EVENT_WAITER_RECEIVES: a thread blocked for a CQ event reads the sockets itself
    // IWEMU_RX_LOOKAHEAD: octets a payload read takes beyond its FPDU into
    // the staging buffer (rx_lookahead_min..max), or auto (0): the maximum
    // when the peer is on this host, else the minimum.  Larger reads cross FPDU boundaries at the price
    // of copying the payload they catch (docs/configuration.md).
    uint32_t rx_lookahead = 0;
    // IWEMU_TX_COALESCE: a post made while TCP pushes back joins the send
    // backlog without a system call; the engine sends it with the rest when
    // the socket has room.  Nothing is ever held back otherwise.
    // docs/configuration.md.
    bool tx_coalesce = true;
    // IWEMU_TCP_CONGESTION: the connection's TCP congestion control.  auto:
    // cubic instead of a pacing BBR when the peer is on this host, else the
    // system's; system: never touched; or an algorithm's name, for every
    // connection.  docs/configuration.md.
    std::string tcp_congestion = "auto";
    // IWEMU_LIVENESS_TIMEOUT_MS: a connection whose sent data stays
    // unacknowledged, or whose idle peer stops answering keepalive probes,
    // this long is dead (TCP_USER_TIMEOUT and keepalive): the QP goes to
    // ERROR.  0: never (TCP's own retransmission limit, ~15 min).
    uint32_t liveness_timeout_ms = 30000;
    // IWEMU_NETDEV: the network interface port 1 follows (state, port
    // events; port_monitor.h).  Empty: the first non-loopback interface up
    // and running at start, else the loopback interface.
    std::string netdev;
    // rdma_link (repeatable, no variable): "NAME NETDEV", a device beyond
    // iwemu0 bound to that interface's addresses; written by `rdma link add`.
    std::vector<std::pair<std::string, std::string>> rdma_links;
    LogLevel log_level = LogLevel::warn;  // IWEMU_LOG: error|warn|info|debug
    // IWEMU_CAPTURE (path, %p = pid), IWEMU_CAPTURE_SNAPLEN,
    // IWEMU_CAPTURE_PAYLOAD, IWEMU_CAPTURE_MAX_SIZE, IWEMU_CAPTURE_FILES:
    // every QP's byte stream as pcapng (emulator/capture/stream_capture.h).
    capture::Settings capture;
    // IWEMU_FAULTS: fault-injection rules (emulator/faults/fault_rules.h); "" = none.
    std::string faults;
    // A faults value that did not parse: where and why, with the value and a
    // caret under the mistake.  Fatal: iwemu-run refuses to start the
    // program, and an emulator made with it ends the process (emulator.cpp):
    // a test run without the faults it asked for would pass for nothing.
    std::string faults_error;
    std::string config_file;         // IWEMU_CONFIG: path of the file that was read ("" = none)
    // Tests only (no key, no variable): nonzero makes STag keys repeat from
    // run to run, so a fuzz corpus can name registered regions.
    uint32_t stag_key_seed = 0;
    // Tests only: false keeps the engine thread from reading QP sockets, as
    // when it gets no CPU; pollers, waiters and posters receive as ever.
    bool engine_receives = true;

    // Parse "key = value" (keys as in the file, e.g. "crc", "mpa_rev").
    // Returns false and sets error on an unknown key or a bad value.
    bool set(std::string_view key, std::string_view value, std::string* error);
};

// The file load_config() reads: $IWEMU_CONFIG, else ~/.config/iwemu.conf
// (which may not exist yet); "" without HOME.
std::string user_config_path();

// Defaults ← IWEMU_CONFIG file (or ~/.config/iwemu.conf if it exists) ← IWEMU_* env.
// Bad entries are reported on stderr and ignored (a typo never kills the app).
Config load_config();

// Parse a config file's text into cfg; returns the number of errors (each
// reported through `report`, one line per problem).
int parse_config_text(std::string_view text, Config& cfg, std::string* report);

}  // namespace iwemu
