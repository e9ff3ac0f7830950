// Receive path of a QP: bytes from the socket → wire::FpduReceiver (pull
// mode) → DDP placement → RDMAP delivery.
//
// Placement never stages payload when it can avoid it: once a segment's
// header is validated, its payload is read with recvmsg() straight into the
// target (the MR for tagged segments, the receive WQE's SGEs for untagged
// ones), with a tail iovec into the staging buffer that picks up the
// PAD/CRC and the next FPDU header in the same system call.  Only payload
// that arrived together with its header in one read is copied: small
// messages, and with a peer on the same host whatever of the next FPDU the
// 64 KiB tail caught (Config::rx_lookahead: there the copy is faster than
// the kernel's copy into cold user memory), and the last 64 octets of every
// segment (placement_copy.h: the octet an application polls is written
// once, and last).  Every check of RFC 5041 §7.1 /
// RFC 5040 §7.2 happens before a single octet is placed; every failure ends
// in a Terminate, ERR and flush.
#include <sys/socket.h>
#include <sys/uio.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <utility>

#include "emulator/capture/stream_capture.h"
#include "emulator/cq.h"
#include "emulator/emulator.h"
#include "emulator/engine.h"
#include "emulator/base/log.h"
#include "emulator/odp_memory.h"
#include "emulator/qp/placement_copy.h"
#include "emulator/qp/qp.h"
#include "emulator/qp/stag_terminate.h"
#include "emulator/srq.h"
#include "emulator/stack_batch.h"
#include "emulator/wire/rdmap_message.h"
#include "emulator/wire/read_request.h"

namespace iwemu {

namespace {

using wire::TerminateCode;
using wire::TerminateLayer;
namespace et = wire::etype;
namespace ec = wire::ecode;

using stag_terminate::ddp_tagged;
using stag_terminate::ddp_untagged;
using stag_terminate::rdmap_op;
using stag_terminate::rdmap_prot;

// Completion status of the requester's WR a received Terminate kills.
WcStatus status_for_terminate(const TerminateCode& c)
{
    if (c.layer == TerminateLayer::rdmap && c.etype == et::rdmap_remote_protection) return WcStatus::rem_access_err;
    if (c.layer == TerminateLayer::ddp && c.etype == et::ddp_tagged_buffer) return WcStatus::rem_access_err;
    if (c.layer == TerminateLayer::ddp && c.etype == et::ddp_untagged_buffer) return WcStatus::rem_inv_req_err;
    if (c.layer == TerminateLayer::rdmap && c.etype == et::rdmap_remote_operation) return WcStatus::rem_op_err;
    return WcStatus::fatal_err;
}

}  // namespace

void QueuePair::rx_progress()
{
    bool kick;
    {
        std::lock_guard<std::mutex> g(rx_lock_);
        count(counters_.rx_engine_passes);
        if (rx_rnr_parked_) rx_rnr_check_peer();  // EPOLLRDHUP: the only read event while parked
        rx_locked();
        kick = std::exchange(rx_.tx_kick, false);
    }
    if (kick) rx_kick_tx();
    drain_deferred();
}

void QueuePair::try_rx_progress(std::atomic<uint64_t>* pass_counter)
{
    bool kick;
    {
        std::unique_lock<std::mutex> g(rx_lock_, std::try_to_lock);
        if (!g.owns_lock()) return;
        if (pass_counter) count(*pass_counter);
        rx_locked();
        kick = std::exchange(rx_.tx_kick, false);
    }
    if (kick) rx_kick_tx();
    drain_deferred();
}

// TX work the receive path made possible (Read Responses to send, an ORD slot
// freed) runs once per read() worth of parsed octets (rx_locked, before the
// next socket read) or, when the pass ends without another read, here after
// rx_lock_ is released: the Responses to every Read Request of one read()
// leave in one sendmsg().
void QueuePair::rx_kick_tx()
{
    std::lock_guard<std::mutex> g(sq_lock_);
    tx_locked();
}

void QueuePair::drain_deferred()
{
    if (!conn_.deferred.load(std::memory_order_acquire)) return;
    std::optional<AsyncEventType> a;
    std::optional<QpConnectionEvent> c;
    {
        std::lock_guard<std::mutex> g(sq_lock_);
        a = conn_.pending_async;
        c = conn_.pending_conn;
        conn_.pending_async.reset();
        conn_.pending_conn.reset();
        conn_.deferred.store(false, std::memory_order_release);
    }
    if (a && !destroyed_) emit_async(*a);
    if (c) emit_connection_event(*c);
}

void QueuePair::defer_locked(std::optional<AsyncEventType> a, std::optional<QpConnectionEvent> c)
{
    if (a && !conn_.pending_async) conn_.pending_async = a;
    if (c && !conn_.event_sent) {
        conn_.pending_conn = c;
        conn_.event_sent = true;
    }
    conn_.deferred.store(true, std::memory_order_release);
}

// Copy of payload octets that arrived in the staging buffer.
void QueuePair::rx_copy_payload(const uint8_t* p, size_t n)
{
    const uint32_t off = rx_.fpdu.payload_received();
    if (rx_.target == RxTarget::user) {
        count(counters_.rx_copied_bytes, n);
        size_t skip = off;
        for (int i = 0; i < rx_.dest_count && n > 0; ++i) {
            const iovec& d = rx_.dest[i];
            if (skip >= d.iov_len) {
                skip -= d.iov_len;
                continue;
            }
            const size_t take = std::min(n, d.iov_len - skip);
            if (__builtin_expect(rx_.dest_odp, 0)) {
                if (!odp_write(static_cast<uint8_t*>(d.iov_base) + skip, p, take)) {
                    rx_.odp_fault = true;
                    return;
                }
            } else {
                placement_copy(static_cast<uint8_t*>(d.iov_base) + skip, p, take);
            }
            p += take;
            n -= take;
            skip = 0;
        }
    } else if (rx_.target == RxTarget::control) {
        const size_t base = rx_.control_len;
        if (base + off + n <= rx_.control.size()) std::memcpy(rx_.control.data() + base + off, p, n);
    }
}

// iovecs for payload octets [off, off + len) of the current segment.
int QueuePair::rx_dest_range(uint32_t off, uint32_t len, iovec* out) const
{
    int n = 0;
    for (int i = 0; i < rx_.dest_count && len > 0; ++i) {
        const iovec& d = rx_.dest[i];
        if (off >= d.iov_len) {
            off -= static_cast<uint32_t>(d.iov_len);
            continue;
        }
        const size_t take = std::min<size_t>(len, d.iov_len - off);
        out[n++] = {static_cast<uint8_t*>(d.iov_base) + off, take};
        len -= static_cast<uint32_t>(take);
        off = 0;
    }
    return n;
}

void QueuePair::rx_locked()
{
    // Read first: an exchange is a locked instruction, and this runs on
    // every empty poll.
    if (conn_.rq_flush_pending.load(std::memory_order_relaxed) && conn_.rq_flush_pending.exchange(false)) flush_rq();
    const int fd = fd_.load(std::memory_order_acquire);
    if (fd < 0 || peer_fin_.load(std::memory_order_relaxed)) return;
    // Parked on a Send header: retry its placement (a receive may be posted
    // now, or the wait is over) before reading anything more.
    if (rx_rnr_parked_ && !rx_place_send(rx_.hdr, rx_.plen)) return;
    if (capture::on() && rx_fault_hold_locked(fd)) return;  // IWEMU_FAULTS delay/stall
    if (rx_.wqe_next) {
        __builtin_prefetch(rx_.wqe_next);
        __builtin_prefetch(reinterpret_cast<const char*>(rx_.wqe_next) + 63);  // slots are not line-aligned
    }
    // recv()/recvmsg(), not read()/readv(): most calls of a polling thread
    // find the socket empty, and the socket calls skip the VFS layer (and
    // the shim's read() interposition): 326 against 360 ns per empty call.
    // Bounded work per call: at most ReceivePath::rx_read_budget socket reads, so the
    // engine serves other QPs in between (fairness).  Octets already in the
    // staging buffer are always processed before returning: level-triggered
    // epoll only brings us back for octets still in the socket.
    int reads = 0;
    // A read that returned less than it asked for emptied the socket: once
    // those octets are parsed, stop instead of paying for a read() that
    // returns EAGAIN (level-triggered epoll, or the next poll, comes back
    // for anything that arrived since).
    bool drained = false;
    for (;;) {
        if (fd_.load(std::memory_order_relaxed) < 0) return;
        if (reads >= ReceivePath::rx_read_budget && rx_.pos == rx_.end) return;
        ++reads;
        ssize_t k;
        if (rx_.dead) {
            // After an error nothing more is placed (RFC 5041 §7.1, MPA-053):
            // drain until the peer closes.
            rx_.pos = rx_.end = 0;
            k = capture::on() ? capture::recv(fd, rx_.staging.data(), rx_.staging.size(), MSG_DONTWAIT, qp_num_)
                              : ::recv(fd, rx_.staging.data(), rx_.staging.size(), MSG_DONTWAIT);
            count(counters_.rx_syscalls);
            if (k > 0) continue;
        } else {
            if (rx_.pos == rx_.end) rx_.pos = rx_.end = 0;
            const wire::FpduRxNeed need = rx_.fpdu.next_need();
            if (rx_.pos < rx_.end) {
                const uint8_t* p = rx_.staging.data() + rx_.pos;
                const size_t avail = rx_.end - rx_.pos;
                wire::FpduReceiver::ConsumeResult r;
                if (need.state == wire::FpduRxState::payload) {
                    const size_t n = std::min<size_t>(avail, need.max_octets);
                    rx_copy_payload(p, n);
                    if (__builtin_expect(rx_.odp_fault, 0)) return rx_odp_fail();
                    r = rx_.fpdu.consume({p, n});
                } else {
                    r = rx_.fpdu.consume_framing({p, avail});
                }
                rx_.pos += r.consumed;
                --reads;  // no system call
                if (!rx_handle_event(r.event)) return;
                continue;
            }
            if (drained) return;  // rx_progress kicks the TX after unlocking
            if (std::exchange(rx_.tx_kick, false)) {
                // Everything read so far is parsed: answer it now, not after
                // the next read() (a Read Response must not wait for an EAGAIN).
                rx_kick_tx();
            }
            if (need.state == wire::FpduRxState::payload && rx_.target == RxTarget::user && need.max_octets >= 256) {
                // Straight into user memory, plus a look-ahead for the trailer
                // and the next header.
                // The segment's last octets go through the staging buffer
                // and placement_copy(): written once, in order, the last one
                // last, which the kernel's copy does not promise.
                const uint32_t direct = need.max_octets - static_cast<uint32_t>(placement_ordered_tail);
                iovec iov[recv_wqe_max_sge + 2];
                int cnt = rx_dest_range(rx_.fpdu.payload_received(), direct, iov);
                iov[cnt++] = {rx_.staging.data(), rx_.lookahead};
                size_t asked = 0;
                for (int i = 0; i < cnt; ++i) asked += iov[i].iov_len;
                msghdr msg{};
                msg.msg_iov = iov;
                msg.msg_iovlen = static_cast<size_t>(cnt);
                k = capture::on() ? capture::recvmsg(fd, &msg, MSG_DONTWAIT, qp_num_) : ::recvmsg(fd, &msg, MSG_DONTWAIT);
                count(counters_.rx_syscalls);
                if (k > 0) {
                    rx_.stream_read += static_cast<size_t>(k);
                    drained = static_cast<size_t>(k) < asked;
                    size_t placed = std::min<size_t>(static_cast<size_t>(k), direct);
                    rx_.end = static_cast<size_t>(k) - placed;
                    rx_.pos = 0;
                    for (int i = 0; i < cnt - 1 && placed > 0; ++i) {
                        const size_t take = std::min(placed, iov[i].iov_len);
                        const auto r = rx_.fpdu.consume({static_cast<const uint8_t*>(iov[i].iov_base), take});
                        placed -= take;
                        if (!rx_handle_event(r.event)) return;
                    }
                    continue;
                }
            } else {
                k = capture::on() ? capture::recv(fd, rx_.staging.data(), rx_.read_hint, MSG_DONTWAIT, qp_num_)
                                  : ::recv(fd, rx_.staging.data(), rx_.read_hint, MSG_DONTWAIT);
                count(counters_.rx_syscalls);
                if (k > 0) {
                    rx_.stream_read += static_cast<size_t>(k);
                    drained = static_cast<size_t>(k) < rx_.read_hint;
                    rx_.pos = 0;
                    rx_.end = static_cast<size_t>(k);
                    continue;
                }
            }
        }
        if (k == 0) {
            IWEMU_LOG(debug, "qp %u: EOF (need state %d max %u, pos %zu end %zu)", qp_num_,
                      static_cast<int>(rx_.fpdu.next_need().state), rx_.fpdu.next_need().max_octets, rx_.pos, rx_.end);
            rx_connection_lost(0);
            return;
        }
        if (errno == EINTR) continue;
        if (errno == EAGAIN || errno == EWOULDBLOCK) return;
        // Straight into an ODP region that is not mapped there: the kernel
        // consumed nothing, the stream is intact; fail the access (no other
        // target can fault: the rest must stay mapped while registered).
        if (errno == EFAULT && rx_.dest_odp && rx_.target == RxTarget::user) return rx_odp_fail();
        rx_connection_lost(errno);
        return;
    }
}

bool QueuePair::rx_handle_event(wire::FpduRxEvent ev)
{
    switch (ev) {
    case wire::FpduRxEvent::none: return true;
    case wire::FpduRxEvent::segment_header: return rx_on_segment_header();
    case wire::FpduRxEvent::segment_end: return rx_on_segment_end();
    case wire::FpduRxEvent::error: {
        const wire::FpduRxError& e = rx_.fpdu.error();
        IWEMU_LOG(info, "qp %u: FPDU error: %.*s", qp_num_, static_cast<int>(e.what.size()), e.what.data());
        // MPA errors carry no headers; DDP errors found by the framer (DV) do.
        std::span<const uint8_t> hdr;
        std::optional<uint16_t> seg_len;
        if (e.code.layer != TerminateLayer::llp) {
            hdr = rx_.fpdu.ddp_header();
            seg_len = rx_.fpdu.ulpdu_length();
        }
        rx_fail(e.code, hdr, seg_len, AsyncEventType::qp_fatal, WcStatus::success);
        return false;
    }
    }
    return true;
}

bool QueuePair::rx_on_segment_header()
{
    const auto bytes = rx_.fpdu.ddp_header();
    const auto h = wire::decode_ddp_header(bytes);
    const uint16_t ulen = rx_.fpdu.ulpdu_length();
    std::memcpy(rx_.control.data(), bytes.data(), bytes.size());
    rx_.control_len = bytes.size();
    if (!h) {
        rx_fail(rdmap_op(ec::rdmap_unspecified), {}, ulen, AsyncEventType::qp_fatal, WcStatus::success);
        return false;
    }
    rx_.hdr = *h;
    rx_.target = RxTarget::none;
    rx_.dest_count = 0;
    const std::span<const uint8_t> offending{rx_.control.data(), rx_.control_len};
    if (auto err = wire::validate_rdmap_segment(rx_.hdr, ulen, {.rfc7306 = rfc7306_, .version = conn_.params.ddp_rdmap_version})) {
        rx_fail(*err, offending, ulen, AsyncEventType::qp_fatal, WcStatus::success);
        return false;
    }
    rx_.opcode = rx_.hdr.rsvdulp0 & wire::rdmap_control_opcode;
    const uint32_t plen = rx_.fpdu.payload_length();
    rx_.plen = plen;
    rx_.ulen = ulen;
    switch (static_cast<wire::RdmapOpcode>(rx_.opcode)) {
    case wire::RdmapOpcode::rdma_write: return rx_place_tagged_write(rx_.hdr, plen);
    case wire::RdmapOpcode::rdma_read_response: return rx_place_read_response(rx_.hdr, plen);
    case wire::RdmapOpcode::send:
    case wire::RdmapOpcode::send_with_invalidate:
    case wire::RdmapOpcode::send_with_se:
    case wire::RdmapOpcode::send_with_se_and_invalidate:
    case wire::RdmapOpcode::immediate_data:  // RFC 7306: a QN-0 message too (immediate_data.cpp)
    case wire::RdmapOpcode::immediate_data_with_se: return rx_place_send(rx_.hdr, plen);
    case wire::RdmapOpcode::rdma_read_request:
    case wire::RdmapOpcode::atomic_request:   // RFC 7306: QN 1 too (atomics.cpp)
    case wire::RdmapOpcode::atomic_response:  // RFC 7306: QN 3, its own sequence
        if (rx_.hdr.msn != rx_.msn[rx_.hdr.qn]) {
            rx_fail(ddp_untagged(ec::ddp_untagged_invalid_msn_range), offending, ulen, AsyncEventType::qp_fatal,
                    WcStatus::success);
            return false;
        }
        rx_.target = RxTarget::control;
        return true;
    case wire::RdmapOpcode::terminate:
        if (plen + rx_.control_len > rx_.control.size()) {
            rx_.target = RxTarget::discard;  // oversize: keep what fits, decode tolerates it
            return true;
        }
        rx_.target = RxTarget::control;
        return true;
    default:
        rx_fail(rdmap_op(ec::rdmap_unexpected_opcode), offending, ulen, AsyncEventType::qp_fatal, WcStatus::success);
        return false;
    }
}

bool QueuePair::rx_place_tagged_write(const wire::DdpHeader& h, uint32_t len)
{
    if (len == 0) return true;  // zero-length: STag and TO are not checked (RFC 5041 §5.2, RTR)
    StagError e;
    MemoryRegion* mr = emu_.stags().acquire(h.stag, pd_, access_remote_write, h.to, len, &e, stream_id_);
    if (!mr) {
        rx_fail(stag_terminate::for_tagged_sink(e), {rx_.control.data(), rx_.control_len}, rx_.ulen,
                AsyncEventType::qp_access_err, WcStatus::success);
        return false;
    }
    rx_.mr = mr;
    rx_.dest_odp = mr->access() & access_on_demand;
    rx_.dest[0] = {mr->at(h.to), len};
    rx_.dest_count = 1;
    rx_.target = RxTarget::user;
    return true;
}

bool QueuePair::rx_place_read_response(const wire::DdpHeader& h, uint32_t len)
{
    TerminateCode err{};
    bool fail = false;
    {
        std::lock_guard<std::mutex> g(sq_lock_);
        if (conn_.rtr_read_response_expected) {
            // The answer to our own Read RTR: absorbed, no WR (RFC 6581 §9.2).
            if (len == 0 && h.control.last) {
                rx_.rtr_absorb = true;
                return true;
            }
            err = rdmap_op(ec::rdmap_unexpected_opcode);
            fail = true;
        } else if (tx_.orq_count == 0 || tx_.orq_front().opcode != WrOpcode::rdma_read) {
            err = rdmap_op(ec::rdmap_unexpected_opcode);  // a Response nobody asked for, or an atomic's turn
            fail = true;
        } else {
            SendWqe& w = tx_.orq_front();
            const uint32_t sink_stag = w.num_sge ? w.sge[0].lkey : 0;
            const uint64_t sink_to = w.num_sge ? w.sge[0].addr : 0;
            if (len > 0) {
                // RFC 5040 §5.2.2: the sink may check STag, TO and length against its request.
                if (h.stag != sink_stag) {
                    err = ddp_tagged(ec::ddp_tagged_invalid_stag);
                    fail = true;
                } else if (h.to < sink_to || h.to - sink_to != w.placed || w.placed + len > w.length) {
                    err = ddp_tagged(ec::ddp_tagged_base_or_bounds_violation);
                    fail = true;
                } else {
                    StackBatch<std::span<const uint8_t>, recv_wqe_max_sge + 1> storage;
                    std::span<const uint8_t>* const slices = storage.items;
                    const int n = payload_slices(w.sge, w.host_delta, w.num_sge, w.placed, len, slices,
                                                 static_cast<int>(std::size(storage.items)));
                    for (int i = 0; i < n; ++i)
                        rx_.dest[i] = {const_cast<uint8_t*>(slices[i].data()), slices[i].size()};
                    rx_.dest_count = n;
                    rx_.dest_odp = w.flags & SendPath::wqe_odp_sink;
                    rx_.target = RxTarget::user;
                }
            }
        }
    }
    if (fail) {
        rx_fail(err, {rx_.control.data(), rx_.control_len}, rx_.ulen,
                err.layer == TerminateLayer::ddp ? AsyncEventType::qp_access_err : AsyncEventType::qp_fatal,
                WcStatus::success);
        return false;
    }
    return true;
}

bool QueuePair::rx_place_send(const wire::DdpHeader& h, uint32_t len)
{
    const std::span<const uint8_t> offending{rx_.control.data(), rx_.control_len};
    const uint16_t ulen = rx_.ulen;
    const bool immediate = wire::rdmap_opcode_is_immediate_data(rx_.opcode);
    if (immediate && rx_.send_active) return rx_reject_immediate_data_inside_send();
    if (h.msn != rx_.msn[0]) {
        rx_fail(ddp_untagged(ec::ddp_untagged_invalid_msn_range), offending, ulen, AsyncEventType::qp_fatal,
                WcStatus::success);
        return false;
    }
    if (conn_.rtr_expect_rx && !rx_.send_active && len == 0 && h.control.last && h.mo == 0) {
        rx_.rtr_absorb = true;  // zero-length Send RTR: no WQE, no CQE (decision 8)
        return true;
    }
    if (!rx_.send_active) {
        // With the RNR wait on, an empty queue registers us (under the
        // queue's lock, so no post can slip between) for a kick on the next post.
        const bool wait = emu_.config().rnr_wait_ms > 0;
        bool have;
        if (srq_) {
            have = srq_->take(&rx_.wqe, wait ? std::optional<uint32_t>(qp_num_) : std::nullopt);
        } else {
            std::lock_guard<std::mutex> g(rq_lock_);
            have = rq_.pop(&rx_.wqe);
            rx_.wqe_next = rq_.head_slot();
            if (!have && wait) rq_rnr_waiter_ = true;
        }
        // iWARP has no RNR retry: a Send without a posted receive kills the
        // stream (RFC 5041 §7.1 note, DDP-029), after the bounded wait.
        if (!have) return rx_rnr_wait(offending, ulen);
        if (rx_rnr_parked_) rx_rnr_unpark();
        rx_.send_active = true;
        rx_.send_placed = 0;
        rx_.wqe_status = WcStatus::success;
        // Local buffers of the receive WQE: valid lkeys with local write.
        WcStatus st = WcStatus::success;
        rx_.wqe_odp = false;
        if (!local_sge_ok(rx_.wqe.sge, rx_.wqe.num_sge, access_local_write, &st, rx_.wqe_host_delta.data(),
                          &rx_.wqe_odp)) {
            rx_fail({TerminateLayer::rdmap, et::rdmap_local_catastrophic, 0}, {}, std::nullopt,
                    AsyncEventType::qp_fatal, st);
            return false;
        }
    }
    if (immediate) return rx_accept_immediate_data();  // WQE taken; its 8 octets are no Send payload
    if (h.mo != rx_.send_placed) {
        rx_fail(ddp_untagged(ec::ddp_untagged_invalid_mo), offending, ulen, AsyncEventType::qp_fatal,
                WcStatus::success);
        return false;
    }
    if (rx_.send_placed + len > rx_.wqe.total_length) {
        rx_fail(ddp_untagged(ec::ddp_untagged_message_too_long), offending, ulen, AsyncEventType::qp_fatal,
                WcStatus::loc_len_err);
        return false;
    }
    if (len > 0) {
        StackBatch<std::span<const uint8_t>, recv_wqe_max_sge + 1> storage;
        std::span<const uint8_t>* const slices = storage.items;
        const int n = payload_slices(rx_.wqe.sge, rx_.wqe_host_delta.data(), rx_.wqe.num_sge, rx_.send_placed, len,
                                     slices, static_cast<int>(std::size(storage.items)));
        for (int i = 0; i < n; ++i) rx_.dest[i] = {const_cast<uint8_t*>(slices[i].data()), slices[i].size()};
        rx_.dest_count = n;
        rx_.dest_odp = rx_.wqe_odp;
        rx_.target = RxTarget::user;
    }
    return true;
}

bool QueuePair::rx_on_segment_end()
{
    const uint32_t plen = rx_.plen;
    count(counters_.rx_fpdus);
    count(counters_.rx_bytes, plen);
    // Reads into the staging buffer (payload copied) pay off for small
    // segments only.  Judge by the last two: the short tail segment of a
    // large message must not send the next large message through staging.
    rx_.read_hint = std::max(plen, rx_.prev_plen) > ReceivePath::rx_copy_max ? rx_.lookahead : 16384;
    rx_.prev_plen = plen;
    if (rx_.mr) {
        StagTable::release(rx_.mr);
        rx_.mr = nullptr;
    }
    const RxTarget target = rx_.target;
    rx_.target = RxTarget::none;
    rx_.dest_count = 0;
    const bool absorb = rx_.rtr_absorb;
    rx_.rtr_absorb = false;
    bool ok = true;

    switch (static_cast<wire::RdmapOpcode>(rx_.opcode)) {
    case wire::RdmapOpcode::rdma_write: rx_count_write_octets(plen, rx_.hdr.control.last); break;
    case wire::RdmapOpcode::immediate_data:
    case wire::RdmapOpcode::immediate_data_with_se: rx_deliver_immediate_data(); break;
    case wire::RdmapOpcode::rdma_read_response: {
        std::lock_guard<std::mutex> g(sq_lock_);
        if (absorb) {
            conn_.rtr_read_response_expected = false;
            peer_read_our_stream_locked();  // it answered our RTR
            break;
        }
        if (tx_.orq_count == 0) break;  // flushed meanwhile
        SendWqe& w = tx_.orq_front();
        w.placed += plen;
        if (rx_.hdr.control.last) {
            // The Read completes when its Response is delivered (RFC 5040 §5.5 rule 19).
            w.phase = WqePhase::done;
            tx_.orq_pop();
            sq_complete_in_order_locked();
            rx_.tx_kick = true;  // an ORD slot is free again
        }
        break;
    }
    case wire::RdmapOpcode::send:
    case wire::RdmapOpcode::send_with_invalidate:
    case wire::RdmapOpcode::send_with_se:
    case wire::RdmapOpcode::send_with_se_and_invalidate: {
        if (absorb) {
            ++rx_.msn[0];
            break;
        }
        rx_.send_placed += plen;
        if (!rx_.hdr.control.last) break;
        Completion c;
        c.wr_id = rx_.wqe.wr_id;
        c.opcode = WcOpcode::recv;
        c.byte_len = static_cast<uint32_t>(rx_.send_placed);
        c.qp_num = qp_num_;
        c.src_qp = qp_num_;
        const auto op = static_cast<wire::RdmapOpcode>(rx_.opcode);
        if (op == wire::RdmapOpcode::send_with_invalidate || op == wire::RdmapOpcode::send_with_se_and_invalidate) {
            // RFC 5040 §5.3: after delivery, invalidate; only an STag of this stream's PD.
            if (emu_.stags().invalidate(rx_.hdr.rsvdulp1, pd_, stream_id_) != StagError::none) {
                rx_fail(rdmap_prot(ec::rdmap_stag_cannot_be_invalidated), {rx_.control.data(), rx_.control_len},
                        rx_.ulen, AsyncEventType::qp_access_err, WcStatus::rem_inv_req_err);
                return false;
            }
            c.wc_flags |= wc_with_inv;
            c.imm_data_or_inv_rkey = rx_.hdr.rsvdulp1;
        }
        rx_.send_active = false;
        ++rx_.msn[0];
        complete(init_.recv_cq, c,
                 op == wire::RdmapOpcode::send_with_se || op == wire::RdmapOpcode::send_with_se_and_invalidate);
        break;
    }
    case wire::RdmapOpcode::rdma_read_request: ok = rx_handle_read_request(); break;
    case wire::RdmapOpcode::atomic_request: ok = rx_handle_atomic_request(); break;
    case wire::RdmapOpcode::atomic_response: ok = rx_handle_atomic_response(); break;
    case wire::RdmapOpcode::terminate:
        rx_handle_terminate(target == RxTarget::control ? plen : 0);
        return false;
    default: break;
    }
    if (!ok) return false;
    if (rx_.hdr.control.last && !absorb) note_peer_message();  // fin_grace.cpp
    if (!conn_.rx_first_fpdu_seen.load(std::memory_order_relaxed) && !conn_.rx_first_fpdu_seen.exchange(true)) {
        conn_.rtr_expect_rx = false;
        std::lock_guard<std::mutex> g(sq_lock_);
        if (!conn_.tx_gate_open) {
            // Responder: the Initiator's first FPDU arrived and validated; we
            // may speak now (RFC 5044 §7.1.2 rule 4).
            open_tx_gate_locked();
            tx_locked();
        }
        // A peer's QP owns its socket before it sends: an Initiator's always,
        // a Responder's once it has our RTR (siw_proc_mpareply, siw_accept).
        if (conn_.params.role == ConnectionRole::responder || conn_.params.rtr != RtrType::none)
            peer_read_our_stream_locked();
    }
    conn_.rtr_expect_rx = false;
    return true;
}

bool QueuePair::rx_handle_read_request()
{
    const auto rr = wire::decode_read_request(
        std::span<const uint8_t>(rx_.control.data() + rx_.control_len, wire::rdma_read_request_header_size));
    const std::span<const uint8_t> offending{rx_.control.data(), rx_.control_len + wire::rdma_read_request_header_size};
    if (!rr) {
        rx_fail(rdmap_op(ec::rdmap_unspecified), offending, rx_.ulen, AsyncEventType::qp_fatal,
                WcStatus::success);
        return false;
    }
    const bool is_rtr = conn_.rtr_expect_rx && rr->rdma_read_message_size == 0;
    MemoryRegion* source = nullptr;
    if (rr->rdma_read_message_size > 0) {
        StagError e;
        source = emu_.stags().acquire(rr->data_source_stag, pd_, access_remote_read, rr->data_source_to,
                                      rr->rdma_read_message_size, &e, stream_id_);
        if (source && (source->access() & access_on_demand) &&
            !odp_readable(source->at(rr->data_source_to), rr->rdma_read_message_size)) {
            // Unmapped behind an ODP STag: outside the memory the STag names now.
            StagTable::release(source);
            source = nullptr;
            e = StagError::bounds;
        }
        if (!source) {
            rx_fail(stag_terminate::for_rdmap_stag(e), offending, rx_.ulen, AsyncEventType::qp_access_err,
                    WcStatus::success);
            return false;
        }
    }
    bool overflow = false;
    {
        std::lock_guard<std::mutex> g(sq_lock_);
        // RDMAP-023: more outstanding Read Requests than our IRD is a protocol
        // error.  The Read RTR is answered whatever the IRD (RFC 6581 §9.1).
        if (!is_rtr && tx_.irq_count >= conn_.ird) {
            overflow = true;
            count(counters_.rx_reads_over_ird);
        } else if (tx_.irq_count >= tx_.irq.size()) {
            overflow = true;
        } else {
            ReadResponseJob& j = tx_.irq_at(tx_.irq_count);
            j.atomic = false;
            j.sink_stag = rr->data_sink_stag;
            j.sink_to = rr->data_sink_to;
            j.size = rr->rdma_read_message_size;
            j.source = source;
            j.source_to = rr->data_source_to;
            ++tx_.irq_count;
            ++rx_.msn[1];
            count(counters_.rx_read_requests);
            rx_.tx_kick = true;  // answered after this receive pass (rx_kick_tx)
        }
    }
    if (overflow) {
        if (source) StagTable::release(source);
        rx_fail(ddp_untagged(ec::ddp_untagged_invalid_msn_no_buffer), offending, rx_.ulen,
                AsyncEventType::qp_fatal, WcStatus::success);
        return false;
    }
    return true;
}

void QueuePair::rx_handle_terminate(uint32_t body_len)
{
    const auto msg = wire::decode_terminate(
        std::span<const uint8_t>(rx_.control.data() + rx_.control_len, body_len));
    rx_.dead = true;
    {
        std::lock_guard<std::mutex> g(sq_lock_);
        conn_.term_received.valid = true;
        conn_.term_received.code = msg.control.code;
        count(counters_.terminates_received[static_cast<size_t>(msg.control.code.layer) % 3]);
        conn_.term_received.had_ddp_header = msg.control.d;
        conn_.term_received.had_rdma_header = msg.control.r;
        IWEMU_LOG(info, "qp %u: Terminate received %u/%u/0x%02x", qp_num_,
                  static_cast<unsigned>(msg.control.code.layer), msg.control.code.etype, msg.control.code.error_code);
        // The oldest WR that reached the wire is the one the peer refused.
        const WcStatus st = status_for_terminate(msg.control.code);
        for (uint64_t i = tx_.sq_head; i < tx_.sq_tx || (i < tx_.sq_tail && i == tx_.sq_tx && tx_.msg == TxMessage::sq); ++i) {
            SendWqe& w = tx_.wqe(i);
            if (w.phase == WqePhase::sending || w.phase == WqePhase::awaiting_response) {
                w.status = st;
                break;
            }
        }
        // We may stop sending (RFC 5040 §5.4): close our half gracefully.
        conn_.tx_stopped = true;
        const int fd = fd_.load();
        if (fd >= 0 && !conn_.fin_sent) {
            if (capture::on()) capture::shutdown_wr(fd);
            ::shutdown(fd, SHUT_WR);
        }
        conn_.fin_sent = true;
        state_.store(on_iwarp_event(state_.load(), IwarpEvent::terminate_received));
        state_.store(QpState::err);
        flush_locked();
        defer_locked(AsyncEventType::qp_fatal, QpConnectionEvent::terminated);
    }
    flush_rq();
}

void QueuePair::rx_fail(const TerminateCode& code, std::span<const uint8_t> offending,
                        std::optional<uint16_t> seg_len, AsyncEventType event, WcStatus rq_status)
{
    IWEMU_LOG(info, "qp %u: receive error %u/%u/0x%02x", qp_num_, static_cast<unsigned>(code.layer), code.etype,
              code.error_code);
    rx_.dead = true;
    if (rx_.mr) {
        StagTable::release(rx_.mr);
        rx_.mr = nullptr;
    }
    rx_.target = RxTarget::discard;
    if (rx_.send_active && rq_status != WcStatus::success) rx_.wqe_status = rq_status;
    {
        std::lock_guard<std::mutex> g(sq_lock_);
        queue_terminate_locked(code, offending, seg_len);
        state_.store(on_iwarp_event(state_.load(), IwarpEvent::terminate_sent));
        state_.store(QpState::err);
        flush_locked();
        tx_locked();  // the Terminate, then FIN; `terminated` goes to the CM once it is written
        defer_locked(event, std::nullopt);
    }
    flush_rq();
}

// A placement into an ODP region hit memory that is not mapped (writable):
// the access fails as on an RNIC whose page fault cannot be resolved.  A
// tagged target is outside what its STag names now (RFC 5041 §7.2 base or
// bounds); a receive WQE's or a Read WR's own buffer is a local error
// (RDMAP local catastrophic, RFC 5040 §7.2; the WQE: local protection).
void QueuePair::rx_odp_fail()
{
    rx_.odp_fault = false;
    const std::span<const uint8_t> offending{rx_.control.data(), rx_.control_len};
    IWEMU_LOG(info, "qp %u: ODP placement fault", qp_num_);
    if (rx_.hdr.control.tagged && rx_.mr) {
        rx_fail(ddp_tagged(ec::ddp_tagged_base_or_bounds_violation), offending, rx_.ulen,
                AsyncEventType::qp_access_err, WcStatus::success);
    } else {
        if (static_cast<wire::RdmapOpcode>(rx_.opcode) == wire::RdmapOpcode::rdma_read_response) {
            // The Read WR the Response answers keeps that status through the flush.
            std::lock_guard<std::mutex> g(sq_lock_);
            if (tx_.orq_count > 0) tx_.orq_front().status = WcStatus::loc_prot_err;
        }
        rx_fail({TerminateLayer::rdmap, et::rdmap_local_catastrophic, 0}, {}, std::nullopt,
                AsyncEventType::qp_fatal, WcStatus::loc_prot_err);
    }
}

void QueuePair::rx_connection_lost(int err)
{
    if (err == 0) err = conn_.tx_error.load(std::memory_order_relaxed);  // EOF after the error sendmsg took
    IWEMU_LOG(info, "qp %u: connection %s (%s)", qp_num_, err ? "lost" : "closed by peer",
              err ? std::strerror(err) : "FIN");
    if (rx_.mr) {
        StagTable::release(rx_.mr);
        rx_.mr = nullptr;
    }
    bool flush = false;
    {
        std::lock_guard<std::mutex> g(sq_lock_);
        peer_fin_ = true;
        const QpState st = state_.load();
        if (st != QpState::reset && st != QpState::err) {
            state_.store(on_iwarp_event(st, IwarpEvent::llp_closed));
            flush = true;
        }
        flush_locked();
        if (err == 0 && (tx_.iov_count > 0 || (tx_.terminate_pending && !tx_.terminate_sent && !conn_.tx_stopped))) {
            // Half-close (RFC 5041 §6.2.1): the peer still reads; let our
            // Terminate (and the FPDUs queued before it) leave, then close.
            epollout_ = true;
            apply_epoll_interest_locked();  // EPOLLOUT only: the receive side is finished
            tx_locked();
        } else {
            close_socket_locked(err != 0);
        }
        // A dead path (liveness: TCP_USER_TIMEOUT or keepalive gave up) is
        // also a fatal QP error: a QP connected by modify_qp has no CM to
        // hear DISCONNECTED, and nothing else would tell it before its next post.
        const bool dead_path = err == ETIMEDOUT && flush;
        defer_locked(dead_path ? std::optional(AsyncEventType::qp_fatal) : std::nullopt,
                     err == 0 ? QpConnectionEvent::peer_closed : QpConnectionEvent::connection_error);
    }
    if ((flush && !(err == 0 && conn_.params.keep_rq_on_peer_close)) || rx_.send_active) flush_rq();
}

}  // namespace iwemu
