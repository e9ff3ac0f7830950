// Transmit path of a QP: RDMAP messages → DDP segments (≤ MULPDU) → MPA
// FPDUs laid out as iovecs over the user's own buffers (wire::FpduGather),
// several FPDUs per sendmsg().  Runs inline in the posting thread while the
// socket takes data; what does not fit waits for EPOLLOUT in the engine.
//
// Message choice at each message boundary: the Terminate (once, then nothing
// more, RFC 5040 §5.4), the RTR (Initiator's first FPDU, RFC 6581 §9.2),
// then Read Responses (in request order, RFC 5040 §5.2.2) alternating with
// SQ work requests (in posting order, §5.5).  Reads stop at ORD, fences at
// the first outstanding Read.
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "emulator/capture/stream_capture.h"
#include "emulator/emulator.h"
#include "emulator/engine.h"
#include "emulator/base/log.h"
#include "emulator/odp_memory.h"
#include "emulator/qp/qp.h"
#include "emulator/stack_batch.h"
#include "emulator/wire/ddp_header.h"
#include "emulator/wire/rdmap_opcode.h"
#include "emulator/wire/read_request.h"

namespace iwemu {

namespace {

uint8_t rdmap_send_opcode(const uint32_t flags, bool invalidate)
{
    const bool se = flags & send_solicited;
    if (invalidate) return static_cast<uint8_t>(se ? wire::RdmapOpcode::send_with_se_and_invalidate
                                                   : wire::RdmapOpcode::send_with_invalidate);
    return static_cast<uint8_t>(se ? wire::RdmapOpcode::send_with_se : wire::RdmapOpcode::send);
}

}  // namespace

void QueuePair::tx_progress()
{
    {
        std::lock_guard<std::mutex> g(sq_lock_);
        tx_.window_closed.store(false, std::memory_order_relaxed);
        // From the engine: a bounded share, so one busy QP cannot starve the others.
        tx_locked(SendPath::tx_engine_budget);
    }
    drain_deferred();
}

void QueuePair::try_tx_progress()
{
    if (!tx_.backlog.load(std::memory_order_relaxed)) return;
    // A full socket opens when TCP says so (EPOLLOUT), not when a poller
    // asks again: against a closed window that was ~1 M sendmsg()s a second.
    if (tx_.window_closed.load(std::memory_order_relaxed)) return;
    {
        std::unique_lock<std::mutex> g(sq_lock_, std::try_to_lock);
        if (!g.owns_lock()) return;
        tx_locked(SendPath::tx_engine_budget);
    }
    drain_deferred();
}

void QueuePair::set_epollout_locked(bool on)
{
    if (!on) tx_.window_closed.store(false, std::memory_order_relaxed);
    if (epollout_ == on) return;
    tx_.backlog.store(on, std::memory_order_relaxed);
    if (fd_.load(std::memory_order_relaxed) < 0) return;
    epollout_ = on;
    apply_epoll_interest_locked();
}

void QueuePair::apply_epoll_interest_locked()
{
    if (fd_.load(std::memory_order_relaxed) < 0) return;
    set_engine_events_locked(RxOwnership::engine_events(rx_owner_.reader(), rx_owner_.pause(),
                                                        peer_fin_.load(std::memory_order_relaxed), epollout_,
                                                        emu_.config().engine_receives));
}

// A fresh stream: the engine reads it (Config::engine_receives: tests only say no).
uint32_t QueuePair::engine_read_interest() const
{
    return RxOwnership::engine_events(RxOwnership::Reader::engine, RxOwnership::Pause::none, false, false,
                                      emu_.config().engine_receives);
}

int QueuePair::set_engine_events_locked(uint32_t events)
{
    const int rc = emu_.engine().watch(fd_.load(std::memory_order_relaxed), qp_num_, engine_events_, events);
    if (rc == 0) engine_events_ = events;
    return rc;
}

bool QueuePair::local_sge_ok(const Sge* sge, uint32_t n, uint32_t need_access, WcStatus* status,
                             uint64_t* host_delta, bool* odp_sink) const
{
    for (uint32_t i = 0; i < n; ++i) {
        host_delta[i] = 0;
        if (sge[i].length == 0) continue;
        StagError e;
        MemoryRegion* mr = emu_.stags().acquire(sge[i].lkey, pd_, need_access, sge[i].addr, sge[i].length, &e);
        if (!mr) {
            *status = e == StagError::bounds || e == StagError::to_wrap ? WcStatus::loc_prot_err
                      : e == StagError::access                          ? WcStatus::loc_access_err
                                                                        : WcStatus::loc_prot_err;
            return false;
        }
        host_delta[i] = reinterpret_cast<uint64_t>(mr->addr()) - mr->iova();
        if (__builtin_expect(mr->access() & access_on_demand, 0)) {
            // Gathered by memcpy/CRC: must be readable now (an RNIC's fault
            // that cannot be resolved is a local protection error).
            if (need_access & access_local_write) {
                if (odp_sink) *odp_sink = true;
            } else if (!odp_readable(mr->at(sge[i].addr), sge[i].length)) {
                StagTable::release(mr);
                *status = WcStatus::loc_prot_err;
                return false;
            }
        }
        StagTable::release(mr);
    }
    return true;
}

int QueuePair::payload_slices(const Sge* sge, const uint64_t* host_delta, uint32_t num_sge, uint64_t offset,
                              uint32_t len, std::span<const uint8_t>* out, int max) const
{
    int n = 0;
    for (uint32_t i = 0; i < num_sge && len > 0; ++i) {
        if (offset >= sge[i].length) {
            offset -= sge[i].length;
            continue;
        }
        const uint64_t take = std::min<uint64_t>(sge[i].length - offset, len);
        if (n == max) return -1;
        out[n++] = {reinterpret_cast<const uint8_t*>(sge[i].addr + host_delta[i] + offset), static_cast<size_t>(take)};
        len -= static_cast<uint32_t>(take);
        offset = 0;
    }
    return n;
}

// Frame one FPDU into the current batch.  false: no room (flush first).
bool QueuePair::tx_add_fpdu_locked(std::span<const uint8_t> header, std::span<const std::span<const uint8_t>> payload,
                                   TxSlot::Action action, uint64_t sq_index)
{
    if (tx_.slot_first + tx_.slot_count >= SendPath::tx_slots) return false;
    TxSlot& slot = tx_.slots[tx_.slot_first + tx_.slot_count];
    const size_t used = tx_.iov_first + tx_.iov_count;
    const wire::FpduFraming framing{conn_.params.tx.crc, conn_.params.tx.markers, conn_.params.ddp_rdmap_version,
                                    conn_.params.ddp_rdmap_version};
    const auto st = slot.gather.build(header, payload, tx_.stream_offset, framing,
                                      std::span<iovec>(tx_.iov.data() + used, tx_.iov.size() - used));
    if (st == wire::FpduGather::Status::iov_too_small && tx_.slot_count > 0) return false;
    if (st != wire::FpduGather::Status::ok) {
        IWEMU_LOG(error, "qp %u: FPDU framing failed (%d)", qp_num_, static_cast<int>(st));
        return false;
    }
    slot.wire_length = slot.gather.wire_length();
    slot.action = action;
    slot.sq_index = sq_index;
    tx_.stream_offset = slot.gather.next_stream_offset();
    tx_.iov_count += slot.gather.iov_count();
    slot.iov_end = tx_.iov_first + tx_.iov_count;
    tx_.batch_bytes += slot.wire_length;
    ++tx_.slot_count;
    count(counters_.tx_fpdus);
    return true;
}

bool QueuePair::tx_build_control_locked(TxSlot::Action action, std::span<const uint8_t> ulpdu)
{
    return tx_add_fpdu_locked(ulpdu, {}, action, 0);
}

// A local error while building a message (RFC 5040 §7.1 case 1): the WR
// fails, a Terminate without headers replaces the message, the QP goes down.
void QueuePair::tx_local_error_locked(SendWqe& w, WcStatus status)
{
    w.status = status;
    w.phase = WqePhase::done;
    ++tx_.sq_tx;
    tx_.msg = TxMessage::none;
    const wire::TerminateCode code{wire::TerminateLayer::rdmap, wire::etype::rdmap_local_catastrophic, 0};
    queue_terminate_locked(code, {}, std::nullopt);
    state_.store(QpState::err);
    flush_locked();
    conn_.rq_flush_pending.store(true);
    defer_locked(AsyncEventType::qp_fatal, std::nullopt);
}

bool QueuePair::tx_build_sq_segment_locked(SendWqe& w)
{
    const uint64_t index = tx_.sq_tx;
    uint8_t hdr[wire::ddp_untagged_header_size + wire::rdma_read_request_header_size];
    wire::DdpHeader h;
    StackBatch<std::span<const uint8_t>, recv_wqe_max_sge + 1> storage;
    std::span<const uint8_t>* const slices = storage.items;
    int nslices = 0;
    uint32_t seg = 0;
    size_t hlen = 0;

    if (tx_.msg == TxMessage::none) {
        // Starting a new work request.
        if (w.opcode == WrOpcode::local_inv) {
            const StagError e = emu_.stags().invalidate(w.inv_rkey, pd_);
            w.status = e == StagError::none ? WcStatus::success : WcStatus::loc_prot_err;
            w.phase = WqePhase::done;
            ++tx_.sq_tx;
            sq_complete_in_order_locked();
            return true;
        }
        if (w.opcode == WrOpcode::bind_mw) return tx_bind_mw_locked(w);  // memory_window.cpp
        if (awaits_response(w.opcode)) {  // Reads and atomics share ORD (RFC 7306 §5.2)
            if (conn_.ord == 0) {
                tx_local_error_locked(w, WcStatus::loc_qp_op_err);
                return true;
            }
            if (tx_.orq_count >= conn_.ord) return false;  // wait for a Read Response
        }
        if ((w.flags & send_fence) && tx_.orq_count > 0) return false;
        WcStatus st = WcStatus::success;
        bool odp_sink = false;
        if (!(w.flags & send_inline) &&
            !local_sge_ok(w.sge, w.num_sge, awaits_response(w.opcode) ? access_local_write : 0, &st,
                          w.host_delta, &odp_sink)) {
            tx_local_error_locked(w, st);
            return true;
        }
        w.flags = odp_sink ? w.flags | SendPath::wqe_odp_sink : w.flags & ~SendPath::wqe_odp_sink;
        tx_.msg = TxMessage::sq;
        tx_.offset = 0;
        tx_.imm_next = false;
        w.phase = WqePhase::sending;
        if (!awaits_response(w.opcode)) tx_follow_emss_locked(w.length);  // a Read / Atomic Request is one FPDU
    }
    if (tx_.imm_next) return tx_build_immediate_data_locked(w);

    const uint64_t remaining = w.length - tx_.offset;
    switch (w.opcode) {
    case WrOpcode::send:
    case WrOpcode::send_with_inv: {
        const bool inv = w.opcode == WrOpcode::send_with_inv;
        seg = static_cast<uint32_t>(std::min<uint64_t>(remaining, conn_.mulpdu - wire::ddp_untagged_header_size));
        h.control = {false, tx_.offset + seg == w.length, 0, wire::ddp_version};
        h.rsvdulp0 = wire::encode_rdmap_control(
            wire::RdmapControl{wire::rdmap_version, 0, rdmap_send_opcode(w.flags, inv)});
        h.rsvdulp1 = inv ? w.inv_rkey : 0;
        h.qn = wire::rdmap_qn_send;
        h.msn = tx_.msn[0];
        h.mo = static_cast<uint32_t>(tx_.offset);
        hlen = wire::encode_ddp_header(h, hdr);
        break;
    }
    case WrOpcode::rdma_write:
    case WrOpcode::rdma_write_with_imm:  // the Write part, even zero-length (immediate_data.cpp)
        seg = static_cast<uint32_t>(std::min<uint64_t>(remaining, conn_.mulpdu - wire::ddp_tagged_header_size));
        h.control = {true, tx_.offset + seg == w.length, 0, wire::ddp_version};
        h.rsvdulp0 = wire::encode_rdmap_control(wire::RdmapOpcode::rdma_write);
        h.stag = w.rkey;
        h.to = w.remote_addr + tx_.offset;
        hlen = wire::encode_ddp_header(h, hdr);
        break;
    case WrOpcode::rdma_read: {
        h.control = {false, true, 0, wire::ddp_version};
        h.rsvdulp0 = wire::encode_rdmap_control(wire::RdmapOpcode::rdma_read_request);
        h.qn = wire::rdmap_qn_read_request;
        h.msn = tx_.msn[1];
        h.mo = 0;
        hlen = wire::encode_ddp_header(h, hdr);
        wire::RdmaReadRequestHeader rr;
        rr.data_sink_stag = w.num_sge ? w.sge[0].lkey : 0;
        rr.data_sink_to = w.num_sge ? w.sge[0].addr : 0;
        rr.rdma_read_message_size = static_cast<uint32_t>(w.length);
        rr.data_source_stag = w.rkey;
        rr.data_source_to = w.remote_addr;
        hlen += wire::encode_read_request(rr, std::span<uint8_t>(hdr + hlen, sizeof hdr - hlen));
        break;
    }
    case WrOpcode::atomic_cmp_and_swp:
    case WrOpcode::atomic_fetch_and_add: return tx_build_atomic_request_locked(w);  // atomics.cpp
    default:
        tx_local_error_locked(w, WcStatus::loc_qp_op_err);
        return true;
    }
    if (w.opcode != WrOpcode::rdma_read && seg > 0) {
        nslices = payload_slices(w.sge, w.host_delta, w.num_sge, tx_.offset, seg, slices,
                                 static_cast<int>(std::size(storage.items)));
        if (nslices < 0) {
            tx_local_error_locked(w, WcStatus::loc_len_err);
            return true;
        }
    }
    const bool last = w.opcode == WrOpcode::rdma_read || tx_.offset + seg == w.length;
    // Write with Immediate completes with its Immediate Data, not its Write.
    const bool imm_follows = w.opcode == WrOpcode::rdma_write_with_imm;
    if (!tx_add_fpdu_locked({hdr, hlen}, {slices, static_cast<size_t>(nslices)},
                            last && !imm_follows ? TxSlot::Action::sq_sent : TxSlot::Action::none, index))
        return false;
    count(counters_.tx_bytes, seg);
    tx_.offset += seg;
    if (last && imm_follows) {
        tx_.imm_next = true;  // stays this SQ message: nothing gets between Write and Immediate Data
        return true;
    }
    if (last) {
        if (w.opcode == WrOpcode::rdma_read) {
            ++tx_.msn[1];
            tx_.orq_push(index);
        } else if (w.opcode != WrOpcode::rdma_write) {
            ++tx_.msn[0];
        }
        tx_.msg = TxMessage::none;
        tx_.offset = 0;
        ++tx_.sq_tx;
    }
    return true;
}

// RFC 5044 §4.5: MULPDU follows the EMSS.  Linux reports a connection's
// MSS bounded by half the largest window the peer has offered, so right after
// the handshake it is often half what it becomes once the window opens (on
// loopback 32 KiB, then 64 KiB).  Before a message that needs more than one
// FPDU, re-read it now and then (one getsockopt() a millisecond at most);
// a message is cut to one MULPDU from its first FPDU to its last.
void QueuePair::tx_follow_emss_locked(uint64_t message_length)
{
    if (conn_.params.mulpdu_fixed || message_length + wire::ddp_untagged_header_size <= conn_.mulpdu) return;
    const int64_t now = CompletionQueue::now_ns();
    if (now - conn_.mulpdu_checked_ns < QpConnection::mulpdu_check_interval_ns) return;
    conn_.mulpdu_checked_ns = now;
    const std::optional<uint32_t> mulpdu = mulpdu_of_emss(fd_.load(std::memory_order_relaxed), conn_.params.tx.markers);
    if (!mulpdu || *mulpdu == conn_.mulpdu) return;
    IWEMU_LOG(debug, "qp %u: MULPDU %u -> %u (EMSS changed)", qp_num_, conn_.mulpdu, *mulpdu);
    conn_.mulpdu = *mulpdu;
}

std::optional<uint32_t> QueuePair::mulpdu_of_emss(int fd, bool markers)
{
    int mss = 0;
    socklen_t len = sizeof mss;
    if (getsockopt(fd, IPPROTO_TCP, TCP_MAXSEG, &mss, &len) != 0 || mss <= 0) return std::nullopt;
    return wire::mpa_mulpdu(static_cast<uint32_t>(mss), markers);
}

bool QueuePair::tx_build_read_response_segment_locked()
{
    ReadResponseJob& j = tx_.irq_at(tx_.irq_built);
    if (j.atomic) return tx_build_atomic_response_locked(j);  // atomics.cpp
    if (tx_.msg == TxMessage::none) {
        tx_.msg = TxMessage::read_response;
        tx_.offset = 0;
        tx_follow_emss_locked(j.size);
    }
    const uint32_t remaining = j.size - static_cast<uint32_t>(tx_.offset);
    const uint32_t seg = std::min<uint32_t>(remaining, conn_.mulpdu - wire::ddp_tagged_header_size);
    const bool last = tx_.offset + seg == j.size;
    uint8_t hdr[wire::ddp_tagged_header_size];
    wire::DdpHeader h;
    h.control = {true, last, 0, wire::ddp_version};
    h.rsvdulp0 = wire::encode_rdmap_control(wire::RdmapOpcode::rdma_read_response);
    h.stag = j.sink_stag;  // RFC 5040 §5.2.2: copied unchanged from the request
    h.to = j.sink_to + tx_.offset;
    const size_t hlen = wire::encode_ddp_header(h, hdr);
    std::span<const uint8_t> slice[1];
    size_t nslices = 0;
    if (seg) slice[nslices++] = {j.source->at(j.source_to + tx_.offset), seg};
    if (!tx_add_fpdu_locked({hdr, hlen}, {slice, nslices},
                            last ? TxSlot::Action::read_response_done : TxSlot::Action::none, 0))
        return false;
    count(counters_.tx_bytes, seg);
    tx_.offset += seg;
    if (last) {
        ++tx_.irq_built;
        tx_.msg = TxMessage::none;
        tx_.offset = 0;
    }
    return true;
}

bool QueuePair::tx_build_next_locked()
{
    if (!conn_.tx_gate_open) {
        // Local operations need no wire: a Local Invalidate or a Bind at the
        // head runs even while a Responder still waits for the first inbound FPDU.
        if (tx_.msg == TxMessage::none && tx_.sq_tx < tx_.sq_tail && state_.load() == QpState::rts &&
            (tx_.wqe(tx_.sq_tx).opcode == WrOpcode::local_inv ||
             tx_.wqe(tx_.sq_tx).opcode == WrOpcode::bind_mw))
            return tx_build_sq_segment_locked(tx_.wqe(tx_.sq_tx));
        return false;
    }
    if (conn_.tx_stopped || tx_.terminate_in_batch) return false;
    if (tx_.terminate_pending) {
        // Terminate goes out at the next FPDU boundary and is the last FPDU.
        if (!tx_build_control_locked(TxSlot::Action::terminate_sent, {tx_.terminate_ulpdu.data(), tx_.terminate_len}))
            return false;
        tx_.terminate_in_batch = true;
        return true;
    }
    if (conn_.rtr_pending_tx) {
        if (!tx_build_control_locked(TxSlot::Action::rtr_sent, {tx_.control_ulpdu.data(), tx_.control_len})) return false;
        conn_.rtr_pending_tx = false;
        return true;
    }
    switch (tx_.msg) {
    case TxMessage::read_response: return tx_build_read_response_segment_locked();
    case TxMessage::sq: return tx_build_sq_segment_locked(tx_.wqe(tx_.sq_tx));
    default: break;
    }
    if (conn_.wakeup_pending_tx && !tx_.imm_next) return tx_build_wakeup_locked();  // first_fpdus.cpp
    const bool irq_ready = tx_.irq_built < tx_.irq_count;
    const QpState st = state_.load(std::memory_order_relaxed);
    // SQD drains what was posted before the transition too (the CM's graceful close).
    const bool sq_ready = tx_.sq_tx < tx_.sq_tail && (st == QpState::rts || (st == QpState::sqd && conn_.closing));
    if (irq_ready && (!sq_ready || tx_.prefer_irq)) {
        tx_.prefer_irq = false;
        return tx_build_read_response_segment_locked();
    }
    if (sq_ready) {
        tx_.prefer_irq = true;
        return tx_build_sq_segment_locked(tx_.wqe(tx_.sq_tx));
    }
    return false;
}

void QueuePair::tx_retire_locked(TxSlot& slot)
{
    switch (slot.action) {
    case TxSlot::Action::none:
    case TxSlot::Action::rtr_sent: break;
    case TxSlot::Action::sq_sent: {
        if (slot.sq_index < tx_.sq_head) break;  // flushed meanwhile
        SendWqe& w = tx_.wqe(slot.sq_index);
        if (w.phase != WqePhase::sending) break;
        // A Send/Write completes once TCP took all of it (RFC 5040 §5.5
        // rule 18); a Read or an atomic when its Response has been placed.
        w.phase = awaits_response(w.opcode) ? WqePhase::awaiting_response : WqePhase::done;
        if (w.phase != WqePhase::done) break;
        if (local_.linked.load(std::memory_order_acquire) &&
            (w.opcode == WrOpcode::rdma_write || w.opcode == WrOpcode::rdma_write_with_imm)) {
            // Its completion waits for the peer in this process to have
            // consumed the stream up to here (local_peer.cpp): this FPDU's
            // end (tx_flush_batch_locked counted the later ones already sent).
            local_.write_target.store(tx_.stream_sent - tx_.slot_sent_bytes, std::memory_order_relaxed);
        }
        sq_complete_in_order_locked();
        break;
    }
    case TxSlot::Action::read_response_done:
        if (tx_.irq_built == 0 || tx_.irq_count == 0) break;  // flushed meanwhile
        if (ReadResponseJob& j = tx_.irq_at(0); j.source) {
            StagTable::release(j.source);
            j.source = nullptr;
        }
        tx_.irq_head = (tx_.irq_head + 1) % tx_.irq.size();
        --tx_.irq_count;
        --tx_.irq_built;
        count(counters_.tx_read_responses);
        break;
    case TxSlot::Action::terminate_sent: {
        tx_.terminate_sent = true;
        conn_.tx_stopped = true;
        // Nothing follows a Terminate (RFC 5040 §5.4); close our half
        // gracefully so the Terminate arrives (RFC 5040 §6.2.1).
        const int fd = fd_.load(std::memory_order_relaxed);
        if (fd >= 0 && !conn_.fin_sent) {
            if (capture::on()) capture::shutdown_wr(fd);
            ::shutdown(fd, SHUT_WR);
        }
        conn_.fin_sent = true;
        // Only now is the end of the stream final for the CM: an application
        // that destroys the QP on DISCONNECTED no longer cuts the Terminate off.
        defer_locked(std::nullopt, QpConnectionEvent::terminated);
        break;
    }
    }
    slot.action = TxSlot::Action::none;
}

bool QueuePair::tx_flush_batch_locked()
{
    const int fd = fd_.load(std::memory_order_relaxed);
    while (tx_.iov_count > 0) {
        msghdr msg{};
        msg.msg_iov = &tx_.iov[tx_.iov_first];
        msg.msg_iovlen = std::min<size_t>(tx_.iov_count, IOV_MAX);
        const ssize_t n = capture::on() ? capture::sendmsg(fd, &msg, MSG_DONTWAIT | MSG_NOSIGNAL, qp_num_)
                                         : ::sendmsg(fd, &msg, MSG_DONTWAIT | MSG_NOSIGNAL);
        count(counters_.tx_syscalls);
        if (n < 0) {
            if (errno == EINTR) continue;
            if (errno == EAGAIN || errno == EWOULDBLOCK) {
                tx_.window_closed.store(true, std::memory_order_relaxed);
                set_epollout_locked(true);
                return false;
            }
            // Connection gone: the receive side sees it too and tears down.
            IWEMU_LOG(info, "qp %u: sendmsg: %s", qp_num_, std::strerror(errno));
            // The socket reports its error once: after sendmsg took it (an
            // RST, a liveness timeout) a read sees EOF, which must not pass
            // for the peer's FIN.  EPIPE reports nothing new: a read took
            // the error, or our own FIN went.
            if (errno != EPIPE) conn_.tx_error.store(errno, std::memory_order_relaxed);
            conn_.tx_stopped = true;
            set_epollout_locked(false);
            // Nothing more can leave: drop the batch, or a close waiting
            // for it (close_after_tx_locked) would wait forever.
            tx_.reset_batch();
            return false;
        }
        size_t left = static_cast<size_t>(n);
        while (left > 0) {
            iovec& v = tx_.iov[tx_.iov_first];
            if (left >= v.iov_len) {
                left -= v.iov_len;
                ++tx_.iov_first;
                --tx_.iov_count;
            } else {
                v.iov_base = static_cast<uint8_t*>(v.iov_base) + left;
                v.iov_len -= left;
                left = 0;
            }
        }
        tx_.slot_sent_bytes += static_cast<size_t>(n);
        tx_.stream_sent += static_cast<size_t>(n);
        while (tx_.slot_count > 0 && tx_.slot_sent_bytes >= tx_.slots[tx_.slot_first].wire_length) {
            tx_.slot_sent_bytes -= tx_.slots[tx_.slot_first].wire_length;
            tx_retire_locked(tx_.slots[tx_.slot_first]);
            ++tx_.slot_first;
            --tx_.slot_count;
        }
        if (tx_.iov_count > 0) {
            tx_.window_closed.store(true, std::memory_order_relaxed);
            set_epollout_locked(true);  // partial write: the socket is full
            return false;
        }
    }
    tx_.reset_batch();
    return true;
}

void QueuePair::close_after_tx_locked()
{
    if (peer_fin_.load(std::memory_order_relaxed) && tx_.iov_count == 0 && fd_.load(std::memory_order_relaxed) >= 0 &&
        (conn_.tx_stopped || !tx_.terminate_pending || tx_.terminate_sent))
        close_socket_locked(false);
}

void QueuePair::tx_locked(size_t budget)
{
    if (fd_.load(std::memory_order_relaxed) < 0) return;
    size_t framed = 0;
    for (;;) {
        if (tx_.iov_count > 0 && !tx_flush_batch_locked()) return;
        if (conn_.tx_stopped || fd_.load(std::memory_order_relaxed) < 0) {
            close_after_tx_locked();
            return;
        }
        if (framed >= budget) {
            set_epollout_locked(true);  // more to do: come back on the next engine round
            return;
        }
        while (tx_.batch_bytes < SendPath::tx_batch_bytes && tx_build_next_locked()) {
        }
        if (tx_.slot_count == 0) break;
        framed += tx_.batch_bytes;
    }
    set_epollout_locked(false);
    close_after_tx_locked();
    if (fd_.load(std::memory_order_relaxed) < 0) return;
    // Graceful disconnect: FIN once everything owed has left (RFC 5041 §6.2.1).
    if (conn_.closing && !conn_.fin_sent && tx_.sq_tx == tx_.sq_tail && tx_.irq_count == 0 && tx_.msg == TxMessage::none &&
        fin_may_go_locked()) {
        const int fd = fd_.load(std::memory_order_relaxed);
        if (capture::on()) capture::shutdown_wr(fd);
        ::shutdown(fd, SHUT_WR);
        conn_.fin_sent = true;
        IWEMU_LOG(debug, "qp %u: FIN sent (disconnect)", qp_num_);
        fin_stall_arm_locked();
    }
}

void QueuePair::queue_terminate_locked(const wire::TerminateCode& code, std::span<const uint8_t> offending,
                                       std::optional<uint16_t> seg_len)
{
    if (tx_.terminate_pending || tx_.terminate_sent || conn_.tx_stopped) return;  // at most one (RFC 5040 §5.4)
    wire::TerminateCause cause{code, offending, seg_len};
    tx_.terminate_len = wire::build_terminate_ulpdu(cause, tx_.msn[2]++, tx_.terminate_ulpdu);
    if (tx_.terminate_len == 0) return;
    tx_.terminate_pending = true;
    // The Terminate goes right after the FPDU being written (RFC 5040 §5.4):
    // FPDUs framed behind it but not started are dropped (their WRs are flushed).
    if (tx_.slot_count > 1) {
        const size_t keep_end = tx_.slots[tx_.slot_first].iov_end;
        tx_.iov_count = keep_end > tx_.iov_first ? keep_end - tx_.iov_first : 0;
        for (size_t i = tx_.slot_first + 1; i < tx_.slot_first + tx_.slot_count; ++i) tx_.slots[i].action = TxSlot::Action::none;
        tx_.slot_count = 1;
        tx_.batch_bytes = tx_.slots[tx_.slot_first].wire_length;
        tx_.stream_offset = tx_.slots[tx_.slot_first].gather.next_stream_offset();  // markers stay in place
    }
    conn_.term_sent.valid = true;
    conn_.term_sent.code = code;
    count(counters_.terminates_sent[static_cast<size_t>(code.layer) % 3]);
    if (code.layer == wire::TerminateLayer::llp && code.error_code == wire::ecode::mpa_crc_error)
        count(counters_.rx_crc_errors);
    conn_.term_sent.had_ddp_header = !offending.empty();
    conn_.term_sent.had_rdma_header = offending.size() > wire::ddp_untagged_header_size;
    // Responder before the first inbound FPDU: the rule against early FPDUs
    // yields to error reporting (the connection is dead anyway).
    conn_.tx_gate_open = true;
    IWEMU_LOG(info, "qp %u: Terminate %u/%u/0x%02x queued", qp_num_, static_cast<unsigned>(code.layer),
              code.etype, code.error_code);
}

}  // namespace iwemu
