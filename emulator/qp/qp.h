// RC Queue Pair: send/receive queues, the verbs state machine, and the
// RDMAP/DDP data path of one iWARP stream (TX in tx_engine.cpp, RX in
// rx_engine.cpp, connection hand-off and teardown in qp.cpp).
//
// The QP composes its parts, each a type of its own in this folder:
//   SendPath      (send_path.h)       SQ, ORQ, IRQ, the message framed, the batch
//   ReceivePath   (receive_path.h)    FPDU receiver, staging, the segment placed
//   QpConnection  (qp_connection.h)   the stream's life: gate, RTR, FIN, teardown
//   RxOwnership   (rx_ownership.h)    who reads the socket, and every bound on it
//   LocalPeerLink (local_peer_link.h) a peer QP in this process
// The methods that need more than one part stay QueuePair's.
//
// Public part: what the provider and the kmod shim call (ibv_* semantics,
// positive errno returns).  Connection part: what the CM calls.  The rest is
// the engine's.
//
// Locking (in this order, never the reverse):
//   rx_lock_  one receiver at a time (engine thread or a polling thread)
//   sq_lock_  send queue, TX progress, IRD/ORD queues, state changes
//   rq_lock_  receive ring (post_recv vs. the receiver taking a WQE)
//   CQ lock   (inside CompletionQueue::push)
// Connection-event callbacks run with no QP lock held.  CQ notification and
// async-event handlers may run with this QP's locks held: they must only
// signal (write an eventfd / queue the event), never call back into this QP.
#pragma once

#include <sys/uio.h>

#include <array>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <mutex>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "emulator/qp/atomic_ops.h"
#include "emulator/config.h"
#include "emulator/base/connection_params.h"
#include "emulator/qp/local_peer_link.h"
#include "emulator/qp/qp_connection.h"
#include "emulator/qp/qp_state.h"
#include "emulator/qp/rx_ownership.h"
#include "emulator/qp/receive_path.h"
#include "emulator/qp/send_path.h"
#include "emulator/recv_queue.h"
#include "emulator/stag_table.h"
#include "emulator/qp_counters.h"
#include "emulator/status_publisher.h"
#include "emulator/verbs_types.h"
#include "emulator/wire/fpdu.h"
#include "emulator/wire/fpdu_receiver.h"
#include "emulator/wire/ddp_header.h"
#include "emulator/wire/terminate_message.h"
#include "emulator/wire/terminate_codes.h"

namespace iwemu {

class Emulator;

class QueuePair {
public:
    QueuePair(Emulator& emu, uint32_t qp_num, ProtectionDomain* pd, const QpInitAttr& attr);
    ~QueuePair();
    QueuePair(const QueuePair&) = delete;
    QueuePair& operator=(const QueuePair&) = delete;

    // ---- verbs ------------------------------------------------------------
    uint32_t qp_num() const { return qp_num_; }
    ProtectionDomain* pd() const { return pd_; }
    // Never reused in the process (QP numbers are): what a type 2 memory
    // window is associated with (memory_window.cpp).
    uint64_t stream_id() const { return stream_id_; }
    QpState state() const { return state_.load(std::memory_order_acquire); }
    const QpInitAttr& init_attr() const { return init_; }

    // ibv_modify_qp.  EINVAL: illegal transition / cur_state mismatch / ORD or
    // IRD above the device limit; EOPNOTSUPP: attributes an iWARP RC QP
    // cannot take (alternate path, path migration).
    int modify(const QpAttr& attr, uint32_t mask);
    int query(QpAttr* attr, QpInitAttr* init) const;

    // ibv_post_send / ibv_post_recv.  Return 0 or a positive errno and the
    // index of the first WR not posted in *bad:
    //   EINVAL  too many SGEs, inline too long, bad opcode flags
    //   ENOMEM  queue full (as siw)
    //   EINVAL  atomics: remote_addr not 8-octet aligned, not exactly 8
    //           octets of local buffer, or inline (as rxe)
    //   EOPNOTSUPP  send_with_imm; rdma_write_with_imm and atomics
    //               when RFC 7306 is off (config rfc7306)
    //   EINVAL  posting in RESET (SQ: also INIT/RTR are accepted: queued until RTS;
    //           not bind_mw, which needs RTS, as rxe); bind_mw without a window or with SGEs
    // In ERR every WR completes at once with wr_flush_err.  Never allocates.
    // whole (ibv_wr_complete): all n WRs are posted or none is -- ENOMEM with
    // *bad = the first that would not fit, or the first WR's error.
    int post_send(const SendWr* wrs, size_t n, size_t* bad, bool whole = false);
    int post_recv(const RecvWr* wrs, size_t n, size_t* bad);

    void* user_context = nullptr;  // free for the provider / shim

    // ---- connection (CM side; thread-safe) ---------------------------------
    // Take over a connected, non-blocking TCP socket at the first FPDU octet
    // and go to RTS.  Initiator with params.rtr != none sends the RTR first;
    // Responder absorbs it and sends nothing before the Initiator's first
    // FPDU (RFC 5044 §7.1.2 rule 4).  Returns 0 or a negative errno
    // (-EINVAL bad params / QP state, -EISCONN already attached).
    int attach_connection(const ConnectionParams& params);
    // Graceful when nothing is in transmission: FIN now, QP to ERR when
    // both sides closed.  Otherwise (siw's rule) flush both queues and drop
    // the connection (RST) at once: no waiting on the peer (close_locked).
    void disconnect();
    // Abortive: RST (SO_LINGER 0), everything flushed.
    void abort();
    void set_connection_event_handler(std::function<void(QpConnectionEvent)> handler);
    bool connected() const { return fd_.load(std::memory_order_acquire) >= 0; }

    // ---- diagnostics -------------------------------------------------------
    const QpCounters& counters() const { return counters_; }
    size_t rx_lookahead() const { return rx_.lookahead; }  // resolved at attach_connection
    // The socket's congestion control after attach_connection (Config::tcp_congestion).
    const std::string& tcp_congestion() const { return conn_.tcp_congestion; }
    TerminateRecord last_terminate_sent() const;
    TerminateRecord last_terminate_received() const;
    uint32_t mulpdu() const { return conn_.mulpdu; }

    // ---- engine ------------------------------------------------------------
    // Drive the receive path until the socket would block.  try_rx_progress
    // returns at once when another thread is receiving.
    void rx_progress();
    void try_rx_progress(std::atomic<uint64_t>* pass_counter = nullptr);  // counted if it ran
    // Polling threads also push out a backlog the engine left for its next
    // round (no engine wake-up needed), but not one TCP pushed back: that
    // waits for EPOLLOUT.
    void try_tx_progress();
    // A posting thread looks every RxOwnership::assist_every_posts posts
    // whether the receive path read the socket; after assist_after_ns
    // without a read it runs a pass itself (rx_post_assist.cpp).
    // Drive the send path (EPOLLOUT).
    void tx_progress();
    // Engine timer (Engine::schedule_timer): a parked receiver's deadline,
    // or the prompt re-run after a receive was posted for it; the next look
    // at a FIN the peer's window holds back (fin_stall.cpp).
    void on_timer();
    static constexpr auto on_timer_retry = std::chrono::microseconds(200);  // sq_lock_ was busy
    // EPOLLHUP / EPOLLERR without EPOLLIN: the socket died while the receive
    // path was parked (no read interest), or a plain hang-up.
    void rx_hangup();
    // Detach from CQs/SRQ/engine and stop all processing (destroy_qp).
    void shutdown_for_destroy();
    // The same at process exit, giving up at `deadline` (false) if the locks
    // stay taken: exit() may run in a signal handler that interrupted their holder.
    bool shutdown_at_exit(std::chrono::steady_clock::time_point deadline);
    // When our FIN may go (fin_grace.cpp): none = now.  No lock needed;
    // exit waits for it too.
    std::optional<std::chrono::steady_clock::time_point> fin_grace_end() const;
    int socket_fd() const { return fd_.load(std::memory_order_acquire); }

    // ---- poll ownership (rx_poll_owner.cpp) --------------------------------
    // An application thread that busy-polls this QP's CQ takes the receive
    // path over: the engine's EPOLLIN is dropped, so arriving octets wake no
    // thread (each empty poll reads them itself).  The receive path goes back
    // to the engine on a completion returned, on req_notify, or when the
    // polls stop (the engine's lease check).
    void poll_take_rx(int64_t now_ns);  // an empty poll found nothing (`now_ns`: the poller's clock)
    void poll_return_rx();        // poller, CQ arm, or the engine's lease check
    void poll_lease_tick();       // engine thread, once per lease tick: hand back if nobody polled
    bool rx_poll_owned() const { return rx_owner_.owned(); }
    // Whether an empty poll should read this QP's socket.  Not once it has
    // stayed quiet for RxOwnership::quiet_visits empty polls and quiet_ns: a
    // sender whose peer never answers, or the idle rdma_cm QP beside the
    // test QP, would cost a read() per poll.  The engine receives for a
    // quiet QP; its first FPDU makes it wanted again.  `now_ns`: the poller's clock.
    bool poll_rx_wanted(int64_t now_ns);
    bool poll_rx_quiet(int64_t now_ns) const;

    // ---- a thread waiting for a completion event (rx_event_waiter.cpp) ------
    // Whether the QP's send or receive CQ posts events to this channel.
    bool feeds_channel(int channel_fd) const;
    // Takes the receive path for a thread that sleeps on the socket itself;
    // returns the socket, or -1 when the engine must keep it (no socket, EOF
    // read, RNR-parked).  poll_return_rx() gives it back.
    int wait_take_rx();
    // The socket a waiter may keep sleeping on (-1: stop watching it).
    int wait_socket() const;

    // ---- a peer QP in this process (local_peer.cpp) --------------------------
    // On loopback an RDMA Write completes at the sender once TCP took it, but
    // the target QP places it only when its receive path runs: a process
    // that holds both ends and reads the target right after the completion
    // would see old octets (kernel siw places it inside the sender's
    // sendmsg()).  So a poll that returns a Write completion of a QP whose
    // peer lives here first drives the peer's receive path up to that
    // Write, bounded: a peer that cannot place now (parked on a Send with
    // no receive, in error, closed) is not waited for.
    // A CQ poll returned completions of this QP (no lock held).
    void local_writes_place();
    bool local_writes_pending() const
    {
        return local_.write_target.load(std::memory_order_relaxed) >
               local_.write_placed.load(std::memory_order_relaxed);
    }
    uint64_t connection_id() const { return conn_.id.load(std::memory_order_relaxed); }
    static constexpr int64_t local_place_wait_ns = 10'000'000;  // pathological delays only

private:
    // ---------------- send side (send_path.h) ----------------
    using WqePhase = SendPath::WqePhase;
    using SendWqe = SendPath::SendWqe;
    using ReadResponseJob = SendPath::ReadResponseJob;
    using TxMessage = SendPath::TxMessage;
    using TxSlot = SendPath::TxSlot;

    // ---------------- receive side (receive_path.h) ----------------
    using RxTarget = ReceivePath::RxTarget;

    // ---------------- connection (qp_connection.h) ----------------
    using PeerWakeup = QpConnection::PeerWakeup;

    // -- tx_engine.cpp
    // sq_lock_ held; budget: octets to frame before yielding to other QPs (engine)
    void tx_locked(size_t budget = SIZE_MAX);
    bool tx_flush_batch_locked();             // false: would block or failed
    bool tx_build_next_locked();              // false: nothing (more) to send now
    bool tx_build_sq_segment_locked(SendWqe& w);
    bool tx_build_read_response_segment_locked();
    static constexpr bool is_atomic(WrOpcode op)
    {
        return op == WrOpcode::atomic_cmp_and_swp || op == WrOpcode::atomic_fetch_and_add;
    }
    // A Read and an atomic both wait for a response and count against ORD.
    static constexpr bool awaits_response(WrOpcode op) { return op == WrOpcode::rdma_read || is_atomic(op); }
    void tx_follow_emss_locked(uint64_t message_length);
    // tx_coalesce.cpp: send the work requests just posted, or add them to
    // the backlog TCP pushed back.
    void tx_posted_locked();
    bool tx_pushed_back_locked() const;
    static std::optional<uint32_t> mulpdu_of_emss(int fd, bool markers);  // from TCP_MAXSEG
    static size_t rx_lookahead_for(uint32_t configured, bool same_host);  // Config::rx_lookahead, auto resolved
    bool tx_build_control_locked(TxSlot::Action action, std::span<const uint8_t> ulpdu);
    bool tx_add_fpdu_locked(std::span<const uint8_t> header, std::span<const std::span<const uint8_t>> payload,
                            TxSlot::Action action, uint64_t sq_index);
    void tx_local_error_locked(SendWqe& w, WcStatus status);
    void tx_retire_locked(TxSlot& slot);
    void sq_complete_in_order_locked();
    void set_epollout_locked(bool on);
    int waitable_socket_locked() const;       // rx_event_waiter.cpp
    void poll_release_rx_locked();            // rx_poll_owner.cpp: hand EPOLLIN back
    // sq_lock_: the socket's epoll interest, RxOwnership::engine_events of
    // rx_owner_, peer_fin_ and epollout_.
    void apply_epoll_interest_locked();
    int set_engine_events_locked(uint32_t events);
    uint32_t engine_read_interest() const;
    // Local SGEs name octets by their region's Tagged Offsets (iova), which
    // differ from host addresses for zero-based / reg_mr_iova regions:
    // local_sge_ok fills host_delta[i] = host address - iova for payload_slices.
    // *odp_sink (if given) is set when a written SGE lies in an ODP region:
    // placement into it must be fault-safe (odp_memory.h).  A read SGE in one
    // is checked readable here.
    bool local_sge_ok(const Sge* sge, uint32_t n, uint32_t need_access, WcStatus* status,
                      uint64_t* host_delta, bool* odp_sink = nullptr) const;
    int payload_slices(const Sge* sge, const uint64_t* host_delta, uint32_t num_sge, uint64_t offset, uint32_t len,
                       std::span<const uint8_t>* out, int max) const;
    void queue_terminate_locked(const wire::TerminateCode& code, std::span<const uint8_t> offending,
                                std::optional<uint16_t> seg_len);

    // -- immediate_data.cpp (RFC 7306 Immediate Data: Write with Immediate)
    bool tx_build_immediate_data_locked(SendWqe& w);  // the Immediate Data after w's RDMA Write
    // rx_place_send checked MSN and took the receive WQE (as for a Send):
    bool rx_accept_immediate_data();                  // segment header: collect the 8 octets
    bool rx_reject_immediate_data_inside_send();      // a multi-segment Send still incomplete
    void rx_deliver_immediate_data();                 // segment end: the receive completion
    void rx_count_write_octets(uint32_t len, bool last);  // byte_len of the next Immediate Data

    // -- atomics.cpp (RFC 7306 Atomic Operations: FetchAdd, CmpSwap)
    bool tx_build_atomic_request_locked(SendWqe& w);  // one FPDU on QN 1; w joins the ORQ
    bool tx_build_atomic_response_locked(ReadResponseJob& j);  // performs the operation, then answers on QN 3
    bool rx_handle_atomic_request();                  // segment end: checks, then an IRQ entry
    bool rx_handle_atomic_response();                 // segment end: the original value to the ORQ head

    // -- rx_engine.cpp
    void rx_locked();                         // rx_lock_ held
    bool rx_handle_event(wire::FpduRxEvent ev);  // false: stop (error / terminate)
    bool rx_on_segment_header();
    bool rx_on_segment_end();
    bool rx_place_tagged_write(const wire::DdpHeader& h, uint32_t len);
    bool rx_place_read_response(const wire::DdpHeader& h, uint32_t len);
    bool rx_place_send(const wire::DdpHeader& h, uint32_t len);
    // -- rx_rnr_wait.cpp: a Send that finds no receive posted parks the
    // receive path (TCP back-pressure instead of IB's RNR NAK) for at most
    // Config::rnr_wait_ms, then Terminates as without the wait.
    bool rx_rnr_wait(std::span<const uint8_t> offending, uint16_t ulen);
    void rx_rnr_unpark();
    void rx_rnr_kick();                       // a receive was posted for the parked receiver
    void rx_rnr_check_peer();                 // engine: the peer's FIN / RST behind the parked Send ends the wait
    void rx_rnr_timer_locked();               // on_timer: the deadline, or a receive posted meanwhile
    // -- rx_fault_hold.cpp: IWEMU_FAULTS delay/stall/late_read keep the socket
    // unread a while (parked as above, on the engine's timer).
    bool rx_fault_hold_locked(int fd);
    // -- fin_stall.cpp: a graceful close's FIN behind octets that a peer
    // with a closed window never takes ends in an abortive close.
    void fin_stall_arm_locked();              // sq_lock_: the FIN was just queued
    void fin_stall_check_locked();            // rx_lock_ + sq_lock_, from on_timer
    // -- fin_grace.cpp: our FIN waits Config::close_grace_ms after the peer's
    // last message (Linux siw fails a Send it has sent when our FIN comes first).
    void note_peer_message();                 // rx_lock_
    bool fin_may_go_locked();                 // sq_lock_: false while the grace lasts (timer set)
    // -- first_fpdus.cpp: how long a Responder waits for the Initiator's
    // first FPDU, and the zero-length Writes that wake a peer which left
    // our first FPDUs unread (Linux siw's late receive callback).
    void first_fpdus_arm_locked();            // sq_lock_, at attach
    void first_fpdus_timer_locked();          // rx_lock_ + sq_lock_, from on_timer
    void open_tx_gate_locked();               // sq_lock_: the Responder may send
    void peer_read_our_stream_locked();       // sq_lock_: no wake-up needed any more
    bool tx_build_wakeup_locked();            // sq_lock_, at a message boundary
    // local_peer.cpp: one pass of this (peer) QP's receive path for a
    // sender in this process, until `stream_octets` of connection `conn`
    // are placed.
    enum class LocalPlace : uint8_t { placed, pending, blocked };
    LocalPlace rx_place_for_local_peer(uint64_t conn, uint64_t stream_octets);
    void local_peer_link(const std::shared_ptr<QueuePair>& peer, uint64_t peer_conn, bool earlier);
    bool rx_handle_read_request();
    void rx_handle_terminate(uint32_t body_len);
    void rx_fail(const wire::TerminateCode& code, std::span<const uint8_t> offending,
                 std::optional<uint16_t> seg_len, AsyncEventType event, WcStatus rq_status);
    void rx_connection_lost(int err);
    void rx_kick_tx();                        // no lock held: tx_locked() for rx_.tx_kick
    void rx_copy_payload(const uint8_t* p, size_t n);
    void rx_odp_fail();
    int rx_dest_range(uint32_t off, uint32_t len, iovec* out) const;
    // Async / connection events found under a lock, delivered after unlocking.
    void defer_locked(std::optional<AsyncEventType> a, std::optional<QpConnectionEvent> c);
    void drain_deferred();

    // -- memory_window.cpp: Bind Memory Window work requests
    int check_bind_post(const SendWr& wr, QpState st) const;  // post time: 0 or EINVAL
    void queue_bind(SendWqe& w, const MwBind& bind);          // post time: kept in the WQE
    bool tx_bind_mw_locked(SendWqe& w);                       // at the SQ head: bind, complete
    static uint64_t next_stream_id();

    // -- qp.cpp
    int post_send_locked(const SendWr* wrs, size_t n, size_t* bad, bool* rx_assist, bool whole);
    size_t build_rtr_locked(RtrType type);
    void flush_locked();                      // sq_lock_ held: complete the SQ with wr_flush_err
    void flush_rq();                          // rx_lock_ held
    // rx_lock_ + sq_lock_ held: shutdown_for_destroy (linger) and at exit.
    // Returns a socket whose graceful end is left to the engine, or -1.
    int shutdown_locked(bool linger);
    void linger_after_destroy(int fd);        // no lock: Engine::linger_close with the CM's handler
    void log_counters_locked() const;
    void publish_addresses(int fd);  // the connection's ends, into the status slot
    void detach_socket_locked();              // close_socket_locked without the close
    void close_socket_locked(bool abortive);
    void close_after_tx_locked();             // peer FIN seen: close once the Terminate/batch left
    void close_locked();                      // rx_lock_ + sq_lock_ held: RTS -> CLOSING (disconnect, SQD)
    void drop_connection_locked();            // rx_lock_ + sq_lock_ held: the abortive end of a disconnect
    void emit_connection_event(QpConnectionEvent ev);
    void emit_async(AsyncEventType type);
    void complete(CompletionQueue* cq, const Completion& c, bool solicited);
    // rx_post_assist.cpp: has the receive path been idle so long that this
    // posting thread should run it?
    bool rx_assist_due_locked();
    void rx_pause_locked(RxOwnership::PauseEvent ev)  // sq_lock_
    {
        if (rx_owner_.apply(ev)) apply_epoll_interest_locked();
    }

    Emulator& emu_;
    const uint32_t qp_num_;
    ProtectionDomain* const pd_;
    const uint64_t stream_id_ = next_stream_id();
    QpInitAttr init_;
    uint32_t access_flags_ = 0;
    // Created in IDLE, which an iWARP RNIC reports as INIT (kernel siw maps
    // IDLE to INIT, cxgb4 starts there); RESET only when asked for.
    // The QP's slot in the process's status segment: its state and counters
    // live there, where other processes read them (status_publisher.h).
    PublishedQp published_{qp_num_};
    std::atomic<QpState>& state_ = published_.slot().state;

    // connection
    std::atomic<int> fd_{-1};
    bool epollout_ = false;
    uint32_t engine_events_ = 0;  // sq_lock_: the socket's interest in the engine's epoll set, 0: not in it
    std::atomic<bool> peer_fin_{false};  // FIN read: no more receiving; close once our TX is out
    std::atomic<bool> destroyed_{false};
    QpConnection conn_;  // qp_connection.h

    mutable std::mutex sq_lock_;
    SendPath tx_;

    // receive queue
    std::mutex rq_lock_;
    RecvRing rq_;
    SharedReceiveQueue* srq_ = nullptr;

    // receive path (rx_lock_)
    std::mutex rx_lock_;
    ReceivePath rx_;
    // Parked on the header of a Send with no receive posted (rx_rnr_wait.cpp).
    bool rx_rnr_parked_ = false;
    std::chrono::steady_clock::time_point rx_rnr_deadline_{};
    bool rq_rnr_waiter_ = false;       // rq_lock_: post_recv must kick the parked receiver
    bool rx_fault_held_ = false;  // rx_lock_: parked by a fault rule (rx_fault_hold.cpp)
    // Who reads the socket, and whether it is paused (rx_ownership.h):
    // changed under sq_lock_ (it decides the epoll interest), the reader
    // read without.
    RxOwnership rx_owner_;
    bool rfc7306_ = true;              // config rfc7306: Immediate Data sent and accepted (immediate_data.cpp)

    LocalPeerLink local_;  // local_peer_link.h

    QpCounters& counters_ = published_.slot().counters;
    friend class Emulator;
    friend class LocalPeers;  // local_peer_link
};

}  // namespace iwemu
