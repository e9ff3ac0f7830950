// The QP's connection: what the CM handed over (params, MULPDU, ORD/IRD),
// the start of the stream (the Responder's TX gate, the RTR, the wake-ups
// of a peer that left our first FPDUs unread), its end (disconnect, our
// FIN, the peer's silence a FIN waits out, the abortive close of a stalled
// FIN, a Terminate either way) and the events that report it.
//
// Guarded by QueuePair::sq_lock_ unless a member says otherwise (the
// atomics are read without it; handler has handler_lock; id changes with
// rx_lock_ and sq_lock_ held).  Driven by qp.cpp (attach, disconnect,
// close, flush), first_fpdus.cpp, fin_stall.cpp, fin_grace.cpp,
// tx_engine.cpp and rx_engine.cpp (RTR, Terminate, MULPDU).
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <mutex>
#include <optional>
#include <string>

#include "emulator/base/connection_params.h"
#include "emulator/verbs_types.h"
#include "emulator/wire/fpdu.h"
#include "emulator/wire/terminate_codes.h"

namespace iwemu {

// What the last Terminate (sent or received) said: tests and diagnostics.
struct TerminateRecord {
    bool valid = false;
    wire::TerminateCode code{wire::TerminateLayer::rdmap, 0, 0};
    bool had_ddp_header = false;
    bool had_rdma_header = false;
};

struct QpConnection {
    std::function<void(QpConnectionEvent)> handler;
    std::mutex handler_lock;

    ConnectionParams params;
    uint32_t mulpdu = wire::mpa_mulpdu_max;
    int64_t mulpdu_checked_ns = 0;    // sq_lock_: when TCP_MAXSEG was last read (tx_follow_emss_locked)
    static constexpr int64_t mulpdu_check_interval_ns = 1'000'000;
    uint16_t ord = 0;   // outbound Reads in flight allowed
    uint16_t ird = 0;   // inbound Reads queued allowed
    // IB transport timers (timeout, retry_cnt, rnr_retry, min_rnr_timer):
    // TCP retransmits for an RNIC, so they only read back as they were set,
    // as applications and rdma-core's tests expect of a device.
    struct IbTimers {
        uint8_t timeout = 0, retry_cnt = 0, rnr_retry = 0, min_rnr_timer = 0;
    } ib_timers;
    bool tx_gate_open = false;      // responder: closed until the first inbound FPDU
    // ... or until this time (client/server mode; first_fpdus.cpp)
    std::optional<std::chrono::steady_clock::time_point> tx_gate_deadline;
    // first_fpdus.cpp (sq_lock_): the wake-ups of a peer that may have left
    // our first FPDUs unread.
    enum class PeerWakeup : uint8_t {
        after_gate,  // Responder: scheduled once its wait for the Initiator ends
        scheduled,   // at wakeup_epoch + the delay of wakeup_step
        done,        // the peer read our stream, the steps ran out, or off
    };
    PeerWakeup wakeup_state = PeerWakeup::done;
    uint8_t wakeup_step = 0;
    bool wakeup_pending_tx = false;  // one to send at the next message boundary
    std::chrono::steady_clock::time_point wakeup_epoch{};
    std::atomic<bool> rx_first_fpdu_seen{false};
    bool rtr_pending_tx = false;    // initiator: RTR still to send
    bool rtr_expect_rx = false;     // responder: next FPDU is the RTR
    bool rtr_read_response_expected = false;  // initiator sent a Read RTR
    bool closing = false;           // disconnect() requested: FIN after the SQ drains
    bool fin_sent = false;
    // sq_lock_: a FIN queued behind octets TCP has not sent (fin_stall.cpp).
    int fin_stall_unsent = 0;                      // those octets at the last look; 0: not watching
    std::chrono::steady_clock::time_point fin_stall_next{};  // the next look
    std::atomic<int64_t> rx_last_message_ns{0};  // fin_grace.cpp: coarse clock, 0: none yet
    std::optional<std::chrono::steady_clock::time_point> linger_fin_at;  // shutdown_locked -> linger_after_destroy
    bool tx_stopped = false;        // Terminate sent or socket dead: nothing more goes out
    std::atomic<int> tx_error{0};   // the socket error a sendmsg took (ECONNRESET, ETIMEDOUT), 0: none
    bool event_sent = false;
    std::optional<AsyncEventType> pending_async;
    std::optional<QpConnectionEvent> pending_conn;
    std::atomic<bool> deferred{false};
    std::atomic<bool> rq_flush_pending{false};   // the one final connection event of this attachment went out
    std::atomic<uint64_t> id{0};            // this attachment (rx_lock_ + sq_lock_ to change)
    std::string tcp_congestion;              // set once at attach, before the socket goes live
    TerminateRecord term_sent, term_received;
};

}  // namespace iwemu
