// QueuePair: creation, verbs (modify/query/post), connection hand-off and
// teardown, flushing.  The data path lives in tx_engine.cpp / rx_engine.cpp.
#include "emulator/qp/qp.h"

#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cinttypes>
#include <cstring>
#include <thread>

#include "emulator/capture/stream_capture.h"
#include "emulator/cq.h"
#include "emulator/emulator.h"
#include "emulator/engine.h"
#include "emulator/qp/local_peer.h"
#include "emulator/base/log.h"
#include "emulator/pd.h"
#include "emulator/srq.h"
#include "emulator/tcp_socket_tuning.h"
#include "emulator/wire/network_order.h"
#include "emulator/wire/read_request.h"
#include "emulator/wire/rdmap_opcode.h"

namespace iwemu {

static WcOpcode wc_opcode_of(WrOpcode op)
{
    switch (op) {
    case WrOpcode::rdma_write_with_imm:  // IB reports IBV_WC_RDMA_WRITE for it too
    case WrOpcode::rdma_write: return WcOpcode::rdma_write;
    case WrOpcode::rdma_read: return WcOpcode::rdma_read;
    case WrOpcode::local_inv: return WcOpcode::local_inv;
    case WrOpcode::bind_mw: return WcOpcode::bind_mw;
    case WrOpcode::atomic_cmp_and_swp: return WcOpcode::comp_swap;
    case WrOpcode::atomic_fetch_and_add: return WcOpcode::fetch_add;
    default: return WcOpcode::send;
    }
}

// Config::rx_lookahead, with auto (0) resolved for this connection.  On one
// host a large look-ahead pays for its copy: the kernel's copy lands in the
// cache-resident staging buffer instead of cold target memory, and the two
// ends share the cores (docs/performance.md, twelfth session).  Between hosts
// the copy is only extra work for the receiver, so payloads stay zero-copy.
size_t QueuePair::rx_lookahead_for(uint32_t configured, bool same_host)
{
    if (configured == 0) return same_host ? rx_lookahead_max : rx_lookahead_min;
    return configured;
}

QueuePair::QueuePair(Emulator& emu, uint32_t qp_num, ProtectionDomain* pd, const QpInitAttr& attr)
    : emu_(emu), qp_num_(qp_num), pd_(pd), init_(attr), srq_(attr.srq)
{
    const QpCap& cap = attr.cap;
    // Everything the data path needs is allocated here, once: posting never allocates.
    tx_.init(cap);
    if (!srq_) rq_.init(cap.max_recv_wr, cap.max_recv_sge);
    rx_.staging.resize(ReceivePath::rx_staging_size);
    conn_.ord = emu.config().ord;
    conn_.ird = emu.config().ird;
    rfc7306_ = emu.config().rfc7306;
}

QueuePair::~QueuePair()
{
    const int fd = fd_.load();
    if (fd >= 0) ::close(fd);
    for (uint32_t i = 0; i < tx_.irq_count; ++i) {
        ReadResponseJob& j = tx_.irq_at(i);
        if (j.source) StagTable::release(j.source);
    }
    if (rx_.mr) StagTable::release(rx_.mr);
}

// ---------------------------------------------------------------- verbs ----

int QueuePair::modify(const QpAttr& attr, uint32_t mask)
{
    constexpr uint32_t unsupported = qp_attr_alt_path | qp_attr_path_mig_state;
    if (mask & unsupported) return EOPNOTSUPP;
    AsyncEventType ev{};
    bool emit_abort = false;
    {
        std::lock_guard<std::mutex> rg(rx_lock_);
        std::lock_guard<std::mutex> sg(sq_lock_);
        const QpState cur = state_.load();
        if ((mask & qp_attr_cur_state) && attr.cur_qp_state != cur) return EINVAL;
        if ((mask & qp_attr_max_qp_rd_atomic) && attr.max_rd_atomic > limits::max_ord) return EINVAL;
        if ((mask & qp_attr_max_dest_rd_atomic) && attr.max_dest_rd_atomic > limits::max_ird) return EINVAL;
        if ((mask & qp_attr_port) && attr.port_num != 1) return EINVAL;
        Transition t;
        if (mask & qp_attr_state) {
            t = verbs_transition(cur, attr.qp_state, fd_.load() >= 0);
            if (t.error) return t.error;
        }
        if (mask & qp_attr_access_flags) access_flags_ = attr.qp_access_flags;
        // ORD/IRD: the application's values until a connection negotiates its own.
        if (mask & qp_attr_max_qp_rd_atomic) conn_.ord = attr.max_rd_atomic;
        if (mask & qp_attr_max_dest_rd_atomic) conn_.ird = attr.max_dest_rd_atomic;
        if (mask & qp_attr_timeout) conn_.ib_timers.timeout = attr.timeout;
        if (mask & qp_attr_retry_cnt) conn_.ib_timers.retry_cnt = attr.retry_cnt;
        if (mask & qp_attr_rnr_retry) conn_.ib_timers.rnr_retry = attr.rnr_retry;
        if (mask & qp_attr_min_rnr_timer) conn_.ib_timers.min_rnr_timer = attr.min_rnr_timer;
        if (!(mask & qp_attr_state)) return 0;
        const QpState next = attr.qp_state;
        if (t.abort) {
            close_socket_locked(true);
            emit_abort = true;
        }
        // RTS -> SQD: SQD and FIN, or ERR when the close cut a transmission.
        if (t.close) close_locked();
        if (t.flush) {
            state_.store(QpState::err);
            flush_locked();
            flush_rq();
            if (rx_rnr_parked_) rx_rnr_kick();  // no receive can come any more: end the wait now
            (void)ev;
        }
        if (t.reset) {
            flush_locked();  // nothing may survive a reset; no completions for RESET (queues emptied)
            tx_.sq_head = tx_.sq_tx = tx_.sq_tail = 0;
            {
                std::lock_guard<std::mutex> qg(rq_lock_);
                rq_.clear();
            }
            rx_.send_active = false;
            rx_.dead = false;
            rx_rnr_parked_ = false;
            for (auto& m : tx_.msn) m = 1;
            for (auto& m : rx_.msn) m = 1;
            tx_.terminate_pending = tx_.terminate_sent = conn_.tx_stopped = false;
            conn_.tx_error.store(0, std::memory_order_relaxed);
            conn_.closing = conn_.fin_sent = false;
            conn_.fin_stall_unsent = 0;
            peer_fin_ = false;
            conn_.event_sent = false;
        }
        if (!t.close) state_.store(next);
    }
    drain_deferred();
    if (emit_abort) emit_connection_event(QpConnectionEvent::connection_error);
    return 0;
}

int QueuePair::query(QpAttr* attr, QpInitAttr* init) const
{
    std::lock_guard<std::mutex> g(sq_lock_);
    if (attr) {
        *attr = QpAttr{};
        attr->qp_state = attr->cur_qp_state = state_.load();
        attr->qp_access_flags = access_flags_;
        attr->cap = init_.cap;
        attr->max_rd_atomic = static_cast<uint8_t>(conn_.ord);
        attr->max_dest_rd_atomic = static_cast<uint8_t>(conn_.ird);
        attr->sq_draining = state_.load() == QpState::sqd && tx_.sq_head != tx_.sq_tail;
        attr->port_num = 1;
        attr->path_mtu = 5;
        attr->timeout = conn_.ib_timers.timeout;
        attr->retry_cnt = conn_.ib_timers.retry_cnt;
        attr->rnr_retry = conn_.ib_timers.rnr_retry;
        attr->min_rnr_timer = conn_.ib_timers.min_rnr_timer;
    }
    if (init) *init = init_;
    return 0;
}

int QueuePair::post_send(const SendWr* wrs, size_t n, size_t* bad, bool whole)
{
    emu_.note_app_call();
    bool rx_assist = false;
    int rc = post_send_locked(wrs, n, bad, &rx_assist, whole);
    drain_deferred();
    if (rx_assist) try_rx_progress(&counters_.rx_post_assists);
    return rc;
}

int QueuePair::post_send_locked(const SendWr* wrs, size_t n, size_t* bad, bool* rx_assist, bool whole)
{
    std::lock_guard<std::mutex> g(sq_lock_);
    const QpState st = state_.load();
    if (st == QpState::reset) {
        if (bad) *bad = 0;
        return EINVAL;
    }
    // A whole batch needs room for all of it, and a first pass over the WRs
    // that only checks them (the loop restarts to post once they all pass).
    bool checking = whole && n > 1;
    if (checking && st != QpState::err && st != QpState::sqe) {
        const size_t room = tx_.sq.size() - (tx_.sq_tail - tx_.sq_head);
        if (room < n) {
            if (bad) *bad = room;
            return ENOMEM;
        }
    }
    for (size_t i = 0; i < n; ++i) {
        const SendWr& wr = wrs[i];
        int rc = 0;
        switch (wr.opcode) {
        case WrOpcode::send:
        case WrOpcode::send_with_inv:
        case WrOpcode::rdma_write:
        case WrOpcode::rdma_read:
        case WrOpcode::local_inv: break;
        case WrOpcode::bind_mw: rc = check_bind_post(wr, st); break;  // memory_window.cpp
        case WrOpcode::rdma_write_with_imm:  // RDMA Write + RFC 7306 Immediate Data
            if (!rfc7306_) rc = EOPNOTSUPP;
            break;
        case WrOpcode::atomic_cmp_and_swp:  // RFC 7306 Atomic Operations (atomics.cpp)
        case WrOpcode::atomic_fetch_and_add:
            if (!rfc7306_) rc = EOPNOTSUPP;
            // The target must be 64-bit aligned (RFC 7306 §5.1): refused at
            // once, as rxe's ibv_post_send does, rather than by the peer.
            else if (wr.remote_addr % sizeof(uint64_t) != 0) rc = EINVAL;
            break;
        // send_with_imm has no RFC 7306 form that consumes one receive WQE
        // (docs/limits.md).
        default: rc = EOPNOTSUPP;
        }
        if (!rc && wr.num_sge > tx_.max_send_sge) rc = EINVAL;
        if (!rc && wr.num_sge && !wr.sg_list) rc = EINVAL;
        uint64_t total = 0;
        for (uint32_t s = 0; !rc && s < wr.num_sge; ++s) total += wr.sg_list[s].length;
        if (!rc && total > limits::max_msg_size) rc = EINVAL;
        // An atomic returns exactly the 8 octets of the target's original value.
        if (!rc && is_atomic(wr.opcode) && total != sizeof(uint64_t)) rc = EINVAL;
        const bool inl = (wr.send_flags & send_inline) && wr.opcode != WrOpcode::local_inv &&
                         wr.opcode != WrOpcode::bind_mw;
        if (!rc && inl && (total > tx_.max_inline || awaits_response(wr.opcode))) rc = EINVAL;
        if (!rc && tx_.sq_tail - tx_.sq_head >= tx_.sq.size()) rc = ENOMEM;
        if (rc) {
            if (bad) *bad = i;
            return rc;
        }
        if (checking) {
            if (i + 1 == n) {
                checking = false;
                i = static_cast<size_t>(-1);  // every WR passed: post from the first
            }
            continue;
        }
        if (st == QpState::err || st == QpState::sqe) {
            // Posting in ERROR completes at once with a flush status.
            Completion c;
            c.wr_id = wr.wr_id;
            c.status = WcStatus::wr_flush_err;
            c.opcode = wc_opcode_of(wr.opcode);
            c.qp_num = qp_num_;
            complete(init_.send_cq, c, false);
            continue;
        }
        SendWqe& w = tx_.wqe(tx_.sq_tail);
        w.wr_id = wr.wr_id;
        w.opcode = wr.opcode;
        w.flags = wr.send_flags;
        w.remote_addr = wr.remote_addr;
        w.rkey = wr.rkey;
        w.inv_rkey = wr.invalidate_rkey;
        if (wr.opcode == WrOpcode::rdma_write_with_imm) w.imm_data = wr.imm_data;
        w.length = total;
        w.phase = WqePhase::queued;
        w.status = WcStatus::success;
        w.placed = 0;
        if (inl) {
            uint64_t off = 0;
            for (uint32_t s = 0; s < wr.num_sge; ++s) {
                if (wr.sg_list[s].length)
                    std::memcpy(w.inline_buf + off, reinterpret_cast<const void*>(wr.sg_list[s].addr),
                                wr.sg_list[s].length);
                off += wr.sg_list[s].length;
            }
            w.num_sge = total ? 1 : 0;
            w.sge[0] = Sge{reinterpret_cast<uint64_t>(w.inline_buf), static_cast<uint32_t>(total), 0};
            w.host_delta[0] = 0;  // a host address already
        } else {
            w.num_sge = wr.num_sge;
            for (uint32_t s = 0; s < wr.num_sge; ++s) w.sge[s] = wr.sg_list[s];
        }
        if (is_atomic(wr.opcode)) {
            // An atomic's operands wait in its inline buffer, unused by it
            // (every WQE has limits::max_inline_data octets): no SQ octet for them.
            static_assert(limits::max_inline_data >= 2 * sizeof(uint64_t));
            std::memcpy(w.inline_buf, &wr.compare_add, sizeof wr.compare_add);
            std::memcpy(w.inline_buf + sizeof wr.compare_add, &wr.swap, sizeof wr.swap);
        }
        if (wr.opcode == WrOpcode::bind_mw) queue_bind(w, wr.bind);
        ++tx_.sq_tail;
    }
    if (fd_.load(std::memory_order_relaxed) >= 0) {
        tx_posted_locked();
        *rx_assist = rx_assist_due_locked();
    }
    return 0;
}

int QueuePair::post_recv(const RecvWr* wrs, size_t n, size_t* bad)
{
    emu_.note_app_call();
    if (srq_) {
        if (bad) *bad = 0;
        return EINVAL;
    }
    const QpState st = state_.load();
    if (st == QpState::reset) {
        if (bad) *bad = 0;
        return EINVAL;
    }
    if (st == QpState::err) {
        for (size_t i = 0; i < n; ++i) {
            if (wrs[i].num_sge > rq_.max_sge()) {
                if (bad) *bad = i;
                return EINVAL;
            }
            Completion c;
            c.wr_id = wrs[i].wr_id;
            c.status = WcStatus::wr_flush_err;
            c.opcode = WcOpcode::recv;
            c.qp_num = qp_num_;
            complete(init_.recv_cq, c, false);
        }
        return 0;
    }
    int rc = 0;
    bool kick = false;
    {
        std::lock_guard<std::mutex> g(rq_lock_);
        for (size_t i = 0; i < n && rc == 0; ++i) {
            if ((rc = rq_.push(wrs[i])) != 0 && bad) *bad = i;
        }
        // The receiver is parked on a Send that found the queue empty.
        kick = rq_rnr_waiter_ && rq_.count() > 0;
        if (kick) rq_rnr_waiter_ = false;
    }
    if (kick) rx_rnr_kick();
    return rc;
}

// ----------------------------------------------------------- connection ----

void QueuePair::set_connection_event_handler(std::function<void(QpConnectionEvent)> handler)
{
    std::lock_guard<std::mutex> g(conn_.handler_lock);
    conn_.handler = std::move(handler);
}

void QueuePair::emit_connection_event(QpConnectionEvent ev)
{
    std::function<void(QpConnectionEvent)> h;
    {
        std::lock_guard<std::mutex> g(conn_.handler_lock);
        h = conn_.handler;
    }
    IWEMU_LOG(debug, "qp %u: connection event %u", qp_num_, static_cast<unsigned>(ev));
    if (h) h(ev);
}

void QueuePair::emit_async(AsyncEventType type)
{
    AsyncEvent ev;
    ev.type = type;
    ev.qp = this;
    emu_.post_async_event(ev);
}

int QueuePair::attach_connection(const ConnectionParams& params)
{
    if (params.fd < 0) return -EINVAL;
    if (params.rtr != RtrType::none && params.mpa_revision < 2) {
        // RFC 6581 RTRs exist only with Rev 2; refuse a contradictory hand-off.
        return -EINVAL;
    }
    // Both ends of the connection on this host: pair with the other one if
    // it is a QP of this process (local_peer.h), before anything is sent.
    std::shared_ptr<QueuePair> self = emu_.find_qp(qp_num_);
    if (self.get() != this) self.reset();
    {
        std::lock_guard<std::mutex> rg(rx_lock_);
        std::lock_guard<std::mutex> sg(sq_lock_);
        if (destroyed_) return -EINVAL;
        if (fd_.load() >= 0) return -EISCONN;
        const QpState st = state_.load();
        if (st != QpState::init && st != QpState::rtr && st != QpState::rts) return -EINVAL;

        const int fd = params.fd;
        const int fl = fcntl(fd, F_GETFL);
        if (fl < 0) return -EBADF;
        if (!(fl & O_NONBLOCK)) fcntl(fd, F_SETFL, fl | O_NONBLOCK);
        int one = 1;
        setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);  // MPA-011

        publish_addresses(fd);
        const bool same_host = peer_on_this_host(fd);
        conn_.tcp_congestion = apply_congestion_control(fd, emu_.config().tcp_congestion, same_host);
        apply_liveness(fd, emu_.config().liveness_timeout_ms);

        conn_.params = params;
        rx_.lookahead = rx_lookahead_for(emu_.config().rx_lookahead, same_host);
        conn_.mulpdu_checked_ns = CompletionQueue::now_ns();
        if (params.mulpdu) {
            conn_.mulpdu = params.mulpdu < wire::mpa_mulpdu_min ? wire::mpa_mulpdu_min
                      : params.mulpdu > wire::mpa_mulpdu_max ? wire::mpa_mulpdu_max
                                                             : params.mulpdu;
        } else {
            conn_.mulpdu = mulpdu_of_emss(fd, params.tx.markers).value_or(wire::mpa_mulpdu(1460, params.tx.markers));
        }
        // Negotiated depths win over the application's modify values; 0 keeps ours.
        if (params.ord) conn_.ord = params.ord > limits::max_ord ? limits::max_ord : params.ord;
        if (params.ird) conn_.ird = params.ird > limits::max_ird ? limits::max_ird : params.ird;

        wire::FpduReceiverOptions ro;
        ro.crc = params.rx.crc;
        ro.markers = params.rx.markers;
        ro.ddp_version = params.ddp_rdmap_version;
        rx_.fpdu.reset(ro);
        rx_.pos = rx_.end = 0;
        rx_.dead = false;
        rx_.send_active = false;
        rx_.write_len = 0;
        rx_.write_open = false;
        rx_rnr_parked_ = false;
        rx_owner_.apply(RxOwnership::PauseEvent::reset);
        tx_.stream_offset = 0;
        tx_.reset_batch();
        // A new stream: local_peer.cpp counts it from here on both ends.
        tx_.stream_sent = rx_.stream_read = 0;
        const uint64_t conn = next_stream_id();
        conn_.id.store(conn, std::memory_order_relaxed);
        local_.linked.store(false, std::memory_order_relaxed);
        local_.write_target.store(0, std::memory_order_relaxed);
        local_.write_placed.store(0, std::memory_order_relaxed);
        tx_.msg = TxMessage::none;
        tx_.terminate_pending = tx_.terminate_sent = tx_.terminate_in_batch = conn_.tx_stopped = false;
        conn_.tx_error.store(0, std::memory_order_relaxed);
        conn_.closing = conn_.fin_sent = false;
        conn_.fin_stall_unsent = 0;
        peer_fin_ = false;
        tx_.window_closed = false;
        conn_.event_sent = false;
        conn_.rtr_pending_tx = conn_.rtr_expect_rx = conn_.rtr_read_response_expected = false;

        if (params.role == ConnectionRole::initiator) {
            // RFC 5044 §7.1.2: the Initiator may send (and must accept FPDUs) right after the Reply.
            conn_.tx_gate_open = true;
            if (params.rtr != RtrType::none) {
                conn_.rtr_pending_tx = true;
                conn_.rtr_read_response_expected = params.rtr == RtrType::zero_length_read;
                tx_.control_len = build_rtr_locked(params.rtr);
            }
        } else {
            conn_.tx_gate_open = params.responder_may_send_first;
            conn_.rtr_expect_rx = params.rtr != RtrType::none;
        }
        first_fpdus_arm_locked();
        fd_.store(fd, std::memory_order_release);
        state_.store(on_iwarp_event(st, IwarpEvent::connection_attached));
        if (int rc = set_engine_events_locked(engine_read_interest()); rc != 0) {
            fd_.store(-1);
            state_.store(st);
            return rc;
        }
        IWEMU_LOG(info, "qp %u: attached fd %d as %s, mulpdu %u, crc tx/rx %d/%d, markers tx/rx %d/%d, rtr %d, rx look-ahead %zu, "
                  "congestion control %s",
                  qp_num_, fd, params.role == ConnectionRole::initiator ? "initiator" : "responder", conn_.mulpdu,
                  params.tx.crc, params.rx.crc, params.tx.markers, params.rx.markers, static_cast<int>(params.rtr),
                  rx_.lookahead, conn_.tcp_congestion.c_str());
        if (same_host && self) {
            if (const std::string tuple = LocalPeers::tuple_of(fd); !tuple.empty())
                emu_.local_peers().attach(self, tuple, conn);
        }
        tx_locked();  // RTR and anything posted before the connection existed
    }
    emit_connection_event(QpConnectionEvent::established);
    return 0;
}

// RFC 6581 §9.2 / WIRE.md §3: the RTR is an ordinary zero-length message,
// the Initiator's first FPDU.  STag/TO of the Write/Read RTR are sent as 0
// (never checked by the Responder, DDP-013 / RDMAP-009).
size_t QueuePair::build_rtr_locked(RtrType type)
{
    wire::DdpHeader h;
    h.control.dv = wire::ddp_version;
    h.control.last = true;
    size_t n = 0;
    switch (type) {
    case RtrType::zero_length_send:
        h.rsvdulp0 = wire::encode_rdmap_control(wire::RdmapOpcode::send);
        h.qn = wire::rdmap_qn_send;
        h.msn = tx_.msn[0]++;
        n = wire::encode_ddp_header(h, tx_.control_ulpdu);
        break;
    case RtrType::zero_length_write:
        h.control.tagged = true;
        h.rsvdulp0 = wire::encode_rdmap_control(wire::RdmapOpcode::rdma_write);
        n = wire::encode_ddp_header(h, tx_.control_ulpdu);
        break;
    case RtrType::zero_length_read: {
        h.rsvdulp0 = wire::encode_rdmap_control(wire::RdmapOpcode::rdma_read_request);
        h.qn = wire::rdmap_qn_read_request;
        h.msn = tx_.msn[1]++;
        n = wire::encode_ddp_header(h, tx_.control_ulpdu);
        wire::RdmaReadRequestHeader rr{};
        n += wire::encode_read_request(rr, std::span<uint8_t>(tx_.control_ulpdu).subspan(n));
        break;
    }
    case RtrType::none: break;
    }
    return n;
}

void QueuePair::disconnect()
{
    {
        std::lock_guard<std::mutex> rg(rx_lock_);
        std::lock_guard<std::mutex> sg(sq_lock_);
        if (fd_.load() < 0 || conn_.closing) return;
        if (state_.load() == QpState::rts) {
            close_locked();
        } else {
            // After a Terminate: the FIN follows it (tx_locked).
            conn_.closing = true;
            tx_locked();
        }
    }
    drain_deferred();
}

// RTS -> CLOSING, kernel siw's rule (siw_qp_nextstate_from_rts): with no
// work request in transmission the QP closes gracefully -- FIN, and the
// receive side runs on until the peer's FIN.  With one in transmission it
// goes to ERROR instead: the send queue is flushed and the connection
// dropped at once rather than drained.  Draining could take as long as the
// peer keeps its window closed, which an RNR wait does for up to
// rnr_wait_ms (rx_rnr_wait.cpp).  The drop is abortive (RST, RDMAP-026):
// a FIN would queue behind the octets TCP still holds, where a peer with
// a closed window never sees it, and the stream ends mid-message anyway.
// A parked receiver of ours is dropped the same way: its RQ is flushed
// (siw flushes the RQ on CLOSING), so the Send it waits for cannot land,
// and close() with unread data resets the connection in any case.
// A graceful FIN can still queue behind octets of completed WRs that a
// closed window holds back; fin_stall.cpp bounds that wait.
// States after a Terminate never come here: its FIN must stay behind it.
void QueuePair::close_locked()
{
    tx_locked();  // what the socket takes now is not in transmission any more
    const bool in_transmission =
        tx_.iov_count > 0 || tx_.msg != TxMessage::none || tx_.sq_tx != tx_.sq_tail || tx_.irq_count > 0;
    if (!in_transmission && !rx_rnr_parked_) {
        conn_.closing = true;
        state_.store(QpState::sqd);
        tx_locked();  // the FIN
        return;
    }
    IWEMU_LOG(debug, "qp %u: disconnect %s: dropping the connection", qp_num_,
              in_transmission ? "during a transmission" : "while waiting for a receive");
    drop_connection_locked();
}

// RST, ERR, both queues flushed; the local side's disconnect is complete.
void QueuePair::drop_connection_locked()
{
    conn_.closing = true;
    conn_.fin_sent = true;
    close_socket_locked(true);
    rx_rnr_parked_ = false;
    rx_owner_.apply(RxOwnership::PauseEvent::reset);
    if (rx_.mr) {
        StagTable::release(rx_.mr);
        rx_.mr = nullptr;
    }
    state_.store(QpState::err);
    flush_locked();
    flush_rq();
    // Our disconnect is complete: the CM reports DISCONNECTED as for a FIN.
    defer_locked(std::nullopt, QpConnectionEvent::peer_closed);
}

// The engine's timer for this QP: the waits that may have armed it.
void QueuePair::on_timer()
{
    {
        std::lock_guard<std::mutex> rg(rx_lock_);
        rx_rnr_timer_locked();
        // A thread posting in a loop holds sq_lock_ nearly all the time, and
        // a mutex does not queue its waiters: blocking here kept this thread
        // (and rx_lock_) from every socket until the loop ended, so the
        // peer's RDMA Writes waited in the socket meanwhile (ib_send_bw -e's
        // credits, rx_post_assist.cpp).  Come back at the next tick instead.
        std::unique_lock<std::mutex> sg(sq_lock_, std::try_to_lock);
        if (!sg.owns_lock()) {
            // rx_.tx_kick stays set for the retry (or any receive pass before it).
            emu_.engine().schedule_timer(qp_num_, Engine::Clock::now() + on_timer_retry);
        } else {
            fin_stall_check_locked();
            first_fpdus_timer_locked();
            if (conn_.closing && !conn_.fin_sent) tx_locked();  // a FIN the grace held back (fin_grace.cpp)
            // The receive pass above may have read a Read Request that a
            // waiter or poller, woken for the same octets, now never sees.
            if (std::exchange(rx_.tx_kick, false)) tx_locked();
        }
    }
    drain_deferred();
}

void QueuePair::abort()
{
    bool was_connected = false;
    {
        std::lock_guard<std::mutex> rg(rx_lock_);
        std::lock_guard<std::mutex> sg(sq_lock_);
        if (fd_.load() < 0) return;
        was_connected = true;
        close_socket_locked(true);
        if (state_.load() != QpState::reset) state_.store(QpState::err);
        flush_locked();
        flush_rq();
        if (conn_.event_sent) was_connected = false;
        conn_.event_sent = true;
    }
    if (was_connected) emit_connection_event(QpConnectionEvent::connection_error);
}

void QueuePair::close_socket_locked(bool abortive)
{
    const int fd = fd_.load();
    if (fd < 0) return;
    if (abortive) {
        linger lg{1, 0};  // RST instead of FIN (RDMAP-026 LLP abortive termination)
        setsockopt(fd, SOL_SOCKET, SO_LINGER, &lg, sizeof lg);
    }
    detach_socket_locked();
    if (capture::on()) capture::closing(fd, abortive);
    ::close(fd);
}

// The QP lets go of its socket (to close it, or to hand it over): out of
// the engine's epoll set, nothing more to send.
void QueuePair::detach_socket_locked()
{
    const int fd = fd_.load();
    if (fd < 0) return;
    emu_.engine().watch(fd, qp_num_, engine_events_, 0);
    engine_events_ = 0;
    fd_.store(-1, std::memory_order_release);
    epollout_ = false;
    tx_.backlog.store(false, std::memory_order_relaxed);
    // Pinned tagged target of a half-placed segment.
    tx_.reset_batch();
}

void QueuePair::shutdown_for_destroy()
{
    std::unique_lock<std::mutex> rg(rx_lock_);
    std::unique_lock<std::mutex> sg(sq_lock_);
    const int closing_fd = shutdown_locked(true);
    log_counters_locked();
    sg.unlock();
    rg.unlock();
    if (closing_fd >= 0) linger_after_destroy(closing_fd);
}

// The end of a clean stream outlives the QP (Engine::linger_close): the
// CM hears the peer's FIN through the handler the QP had.
void QueuePair::linger_after_destroy(int fd)
{
    std::function<void(QpConnectionEvent)> h;
    {
        std::lock_guard<std::mutex> g(conn_.handler_lock);
        h = std::move(conn_.handler);
    }
    emu_.engine().linger_close(
        fd,
        [h = std::move(h)](int error) {
            if (h) h(error == 0 ? QpConnectionEvent::peer_closed : QpConnectionEvent::connection_error);
        },
        conn_.linger_fin_at);
}

void QueuePair::publish_addresses(int fd)
{
    sockaddr_storage a{};
    socklen_t len = sizeof a;
    if (getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len) == 0) published_.slot().local.store(a);
    a = {};
    len = sizeof a;
    if (getpeername(fd, reinterpret_cast<sockaddr*>(&a), &len) == 0) published_.slot().peer.store(a);
}

void QueuePair::log_counters_locked() const
{
    const QpCounters& c = counters_;
    IWEMU_LOG(info,
              "qp %u: tx %" PRIu64 " FPDUs %" PRIu64 " B in %" PRIu64 " sendmsg; rx %" PRIu64 " FPDUs %" PRIu64
              " B in %" PRIu64 " reads, %" PRIu64 " engine passes, %" PRIu64 " lease lapses",
              qp_num_, c.tx_fpdus.load(), c.tx_bytes.load(), c.tx_syscalls.load(), c.rx_fpdus.load(),
              c.rx_bytes.load(), c.rx_syscalls.load(), c.rx_engine_passes.load(), c.rx_poll_lease_lapses.load());
}

bool QueuePair::shutdown_at_exit(std::chrono::steady_clock::time_point deadline)
{
    // The thread exit() runs on may have been interrupted holding these.
    std::unique_lock<std::mutex> rg(rx_lock_, std::defer_lock);
    std::unique_lock<std::mutex> sg(sq_lock_, std::defer_lock);
    while (!rg.try_lock() || !sg.try_lock()) {
        if (rg.owns_lock()) rg.unlock();
        if (std::chrono::steady_clock::now() >= deadline) return false;
        std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    shutdown_locked(false);
    return true;
}

int QueuePair::shutdown_locked(bool linger)
{
    destroyed_ = true;
    // A clean stream (all FPDUs handed to TCP, no Terminate) ends with a FIN,
    // like siw releasing its socket: the peer still receives what was sent
    // last (ibv_rc_pingpong destroys its QP as soon as its final Send
    // completed).  Anything else is aborted (RST); so is a stream with unread
    // inbound data (the kernel's rule for close()).
    // A Terminate already handed to TCP (FIN queued behind it) is clean too:
    // an RST would discard it, and with it the peer's only error report
    // (RFC 5040 §6.2.1), when it still sits behind Read Response data.
    // A clean stream whose peer has not closed yet is not closed here but
    // handed to the engine (`linger`, returned to the caller): close() with
    // unread input would reset it all the same, and the peer's FIN is still
    // owed to the CM (close_linger.cpp).
    const QpState st = state_.load();
    const bool clean = tx_.iov_count == 0 && (((st == QpState::rts || st == QpState::sqd) && !tx_.terminate_pending &&
                                            !conn_.tx_stopped) ||
                                           tx_.terminate_sent);
    int linger_fd = -1;
    if (clean && linger && fd_.load() >= 0 && !peer_fin_.load()) {
        linger_fd = fd_.load();
        conn_.linger_fin_at.reset();
        if (!conn_.fin_sent) {
            conn_.linger_fin_at = fin_grace_end();  // fin_grace.cpp: the engine sends it then
            if (!conn_.linger_fin_at) {
                if (capture::on()) capture::shutdown_wr(linger_fd);
                ::shutdown(linger_fd, SHUT_WR);
            }
        }
        conn_.fin_sent = true;
        detach_socket_locked();
    } else {
        close_socket_locked(!clean);
    }
    for (uint32_t i = 0; i < tx_.irq_count; ++i) {
        ReadResponseJob& j = tx_.irq_at(i);
        if (j.source) StagTable::release(j.source);
        j.source = nullptr;
    }
    count(counters_.tx_read_responses, tx_.irq_count);  // flushed: no longer in flight
    tx_.irq_count = tx_.irq_built = 0;
    if (rx_.mr) {
        StagTable::release(rx_.mr);
        rx_.mr = nullptr;
    }
    state_.store(QpState::err);
    return linger_fd;
}

// ------------------------------------------------------------- flushing ----

void QueuePair::complete(CompletionQueue* cq, const Completion& c, bool solicited)
{
    if (!destroyed_ && cq) cq->push(c, solicited);
}

void QueuePair::sq_complete_in_order_locked()
{
    // RFC 5040 §5.5 rule 17/18: work requests complete in posting order.
    while (tx_.sq_head < tx_.sq_tx) {
        SendWqe& w = tx_.wqe(tx_.sq_head);
        if (w.phase != WqePhase::done) break;
        if (w.status != WcStatus::success || (w.flags & send_signaled) || init_.sq_sig_all) {
            Completion c;
            c.wr_id = w.wr_id;
            c.status = w.status;
            c.opcode = wc_opcode_of(w.opcode);
            c.byte_len = static_cast<uint32_t>(w.length);
            c.qp_num = qp_num_;
            complete(init_.send_cq, c, false);
        }
        ++tx_.sq_head;
    }
}

void QueuePair::flush_locked()
{
    // Everything not yet complete ends with wr_flush_err (or the error it
    // already carries), in order.  Error completions are generated for
    // unsignaled WRs too (IB spec 10.8.3).
    for (uint64_t i = tx_.sq_head; i < tx_.sq_tail; ++i) {
        SendWqe& w = tx_.wqe(i);
        if (w.phase == WqePhase::done) continue;
        if (w.status == WcStatus::success) w.status = WcStatus::wr_flush_err;
        w.phase = WqePhase::done;
    }
    tx_.sq_tx = tx_.sq_tail;
    sq_complete_in_order_locked();
    tx_.orq_head = tx_.orq_count = 0;
    for (uint32_t i = 0; i < tx_.irq_count; ++i) {
        ReadResponseJob& j = tx_.irq_at(i);
        if (j.source) StagTable::release(j.source);
        j.source = nullptr;
    }
    count(counters_.tx_read_responses, tx_.irq_count);  // flushed: no longer in flight
    tx_.irq_head = tx_.irq_count = tx_.irq_built = 0;
    tx_.msg = TxMessage::none;
    tx_.offset = 0;
}

void QueuePair::flush_rq()
{
    // Caller holds rx_lock_ (so the message being received is ours to end).
    if (rx_.send_active) {
        Completion c;
        c.wr_id = rx_.wqe.wr_id;
        c.status = rx_.wqe_status != WcStatus::success ? rx_.wqe_status : WcStatus::wr_flush_err;
        c.opcode = WcOpcode::recv;
        c.qp_num = qp_num_;
        complete(init_.recv_cq, c, false);
        rx_.send_active = false;
    }
    rx_.wqe_status = WcStatus::success;
    if (srq_) {
        // SRQ WQEs stay with the SRQ; tell the consumer this QP takes no more.
        if (!destroyed_) emit_async(AsyncEventType::qp_last_wqe_reached);
        return;
    }
    std::lock_guard<std::mutex> g(rq_lock_);
    RecvWqe w;
    while (rq_.pop(&w)) {
        Completion c;
        c.wr_id = w.wr_id;
        c.status = WcStatus::wr_flush_err;
        c.opcode = WcOpcode::recv;
        c.qp_num = qp_num_;
        complete(init_.recv_cq, c, false);
    }
}

TerminateRecord QueuePair::last_terminate_sent() const
{
    std::lock_guard<std::mutex> g(sq_lock_);
    return conn_.term_sent;
}

TerminateRecord QueuePair::last_terminate_received() const
{
    std::lock_guard<std::mutex> g(sq_lock_);
    return conn_.term_received;
}

}  // namespace iwemu
