// The RNR wait: a Send that finds no receive posted (RQ or SRQ) parks the
// receive path of its QP instead of killing the stream at once.
//
// iWARP has no RNR NAK (RFC 5041 §7.1: an untagged message with no buffer
// is a fatal error, Terminate DDP 1/2/0x02, which is what Linux siw sends
// at once).  Applications written for InfiniBand (qperf rc_bw, ...) stream
// Sends with no flow control and rely on the RNR retry.  Here the receiver
// simply stops reading its TCP socket at the header of that Send: nothing
// is placed and nothing more is consumed, TCP's window closes and the
// sender stalls, exactly as if the receiver were slow.  The wire stays
// standard iWARP.  A post to the queue resumes the receiver; if none comes
// within Config::rnr_wait_ms the Terminate goes out as it always did
// (rnr_wait_ms = 0: siw's behaviour, no wait at all).
//
// Parked state (rx_lock_): rx_rnr_parked_ and rx_rnr_deadline_; the segment
// header is still in rx_.hdr / rx_control_ and the receiver machine stands
// before its payload.  Wake-ups:
//   * post_recv / SRQ post: the queue's lock orders the failed take that
//     registered us against the post that sees the registration; the post
//     asks the engine to run on_timer() now (no syscall when nobody waits);
//   * the engine timer at the deadline (Engine::schedule_timer);
//   * any poll_cq that drives this QP's receive path meanwhile;
//   * the end of the peer's stream (below).
// While parked the engine has no read interest in the socket (level-
// triggered EPOLLIN would spin); it still hears EPOLLRDHUP and hang-ups.
//
// The peer's FIN behind the parked Send (EPOLLRDHUP, rx_rnr_check_peer)
// shortens the wait to RxOwnership::rnr_wait_after_peer_fin: the sender has finished,
// there is no stream left to pace, and its disconnect must not wait for
// our deadline (it would otherwise see our FIN only after rnr_wait_ms,
// qperf rc_bw at its end).  Not at once: an application still posting its
// receives one by one while the last Sends arrive would lose the message
// whose receive it was about to post (the receiver parks between two of
// its posts).  An RST or both FINs (rx_hangup) leave nothing to deliver:
// the connection is lost.  A local disconnect while parked
// closes abortively (QueuePair::close_locked).
#include <poll.h>
#include <sys/socket.h>

#include <algorithm>
#include <cerrno>

#include "emulator/emulator.h"
#include "emulator/engine.h"
#include "emulator/base/log.h"
#include "emulator/qp/qp.h"

namespace iwemu {

// rx_lock_ held; the queue was found empty.  Returns false: stop receiving
// (parked, or failed with the Terminate).
bool QueuePair::rx_rnr_wait(std::span<const uint8_t> offending, uint16_t ulen)
{
    const auto now = std::chrono::steady_clock::now();
    const QpState st = state_.load(std::memory_order_acquire);
    const bool may_wait = emu_.config().rnr_wait_ms > 0 && (st == QpState::rts || st == QpState::sqd);
    if (!rx_rnr_parked_ && may_wait) {
        rx_rnr_parked_ = true;
        rx_rnr_deadline_ = now + std::chrono::milliseconds(emu_.config().rnr_wait_ms);
        count(counters_.rx_rnr_waits);
        IWEMU_LOG(debug, "qp %u: Send MSN %u found no receive: waiting up to %u ms", qp_num_, rx_.hdr.msn,
                  emu_.config().rnr_wait_ms);
        {
            std::lock_guard<std::mutex> g(sq_lock_);
            rx_pause_locked(RxOwnership::PauseEvent::rnr_park);
        }
        emu_.engine().schedule_timer(qp_num_, rx_rnr_deadline_);
        return false;
    }
    if (rx_rnr_parked_ && may_wait && now < rx_rnr_deadline_) return false;  // keep waiting
    if (rx_rnr_parked_) {
        IWEMU_LOG(info, "qp %u: no receive posted for the Send MSN %u", qp_num_, rx_.hdr.msn);
        rx_rnr_unpark();
    }
    wire::TerminateCode code{wire::TerminateLayer::ddp, wire::etype::ddp_untagged_buffer,
                             wire::ecode::ddp_untagged_invalid_msn_no_buffer};
    rx_fail(code, offending, ulen, AsyncEventType::qp_fatal, WcStatus::success);
    return false;
}

// rx_lock_ held, parked: with no read interest the engine comes here only
// for EPOLLRDHUP or a hang-up.  The peer's FIN queued behind the parked
// Send ends the wait now (rx_rnr_wait then fails the Send as at its
// deadline, and the receive path drains the stream up to that FIN).  An
// RST, or both FINs, leave nothing to deliver: the connection is lost.
void QueuePair::rx_rnr_check_peer()
{
    const int fd = fd_.load(std::memory_order_acquire);
    pollfd p{fd, POLLRDHUP, 0};
    if (fd < 0 || ::poll(&p, 1, 0) != 1) return;
    if (p.revents & (POLLHUP | POLLERR)) {
        int err = 0;
        socklen_t len = sizeof err;
        if (getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len) != 0) err = errno;
        rx_rnr_unpark();
        rx_connection_lost(err);
    } else if (p.revents & POLLRDHUP) {
        IWEMU_LOG(info, "qp %u: the peer closed its half behind the Send MSN %u: waiting %lld ms more at most",
                  qp_num_, rx_.hdr.msn, static_cast<long long>(RxOwnership::rnr_wait_after_peer_fin.count()));
        rx_rnr_deadline_ =
            std::min(rx_rnr_deadline_, std::chrono::steady_clock::now() + RxOwnership::rnr_wait_after_peer_fin);
        {
            std::lock_guard<std::mutex> g(sq_lock_);
            // Level-triggered: EPOLLRDHUP heard again would spin until the deadline.
            rx_pause_locked(RxOwnership::PauseEvent::rnr_peer_fin);
        }
        emu_.engine().schedule_timer(qp_num_, rx_rnr_deadline_);
    }
}

// rx_lock_ held: read the socket again.
void QueuePair::rx_rnr_unpark()
{
    rx_rnr_parked_ = false;
    std::lock_guard<std::mutex> g(sq_lock_);
    rx_pause_locked(RxOwnership::PauseEvent::rnr_unpark);
}

// Any context (no rx_lock_ needed): the engine re-runs the receive path.
void QueuePair::rx_rnr_kick()
{
    emu_.engine().schedule_timer(qp_num_, Engine::Clock::now());
}

// rx_lock_ held, from on_timer: run the parked receiver again.
void QueuePair::rx_rnr_timer_locked()
{
    rx_locked();
    // Still parked (the kick lost the race for an SRQ receive, or the
    // deadline is not reached): keep the deadline armed.
    if (rx_rnr_parked_ && fd_.load(std::memory_order_acquire) >= 0 && !destroyed_)
        emu_.engine().schedule_timer(qp_num_, rx_rnr_deadline_);
}

void QueuePair::rx_hangup()
{
    bool kick;
    {
        std::lock_guard<std::mutex> g(rx_lock_);
        if (rx_rnr_parked_) rx_rnr_check_peer();
        rx_locked();
        kick = std::exchange(rx_.tx_kick, false);
    }
    if (kick) rx_kick_tx();
    drain_deferred();
}

}  // namespace iwemu
