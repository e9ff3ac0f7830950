// A graceful close whose FIN cannot leave: the abortive fallback.
//
// A disconnect with nothing in transmission is graceful (close_locked):
// shutdown(SHUT_WR) queues the FIN behind whatever octets TCP still holds.
// Those octets belong to Sends already completed (a Send completes once
// TCP has taken it), and while the peer's window is closed neither they
// nor the FIN get out.  A peer in its RNR wait (rx_rnr_wait.cpp) keeps its
// window closed until its rnr_wait_ms deadline, and the only thing that
// would end that wait early -- our FIN -- is the thing held back.  The
// application meanwhile waits for DISCONNECTED (qperf rc_bw at its end:
// the sender's last WRs just fit into the socket buffers, the receiver has
// stopped posting).
//
// So once the FIN is queued behind unsent octets, we look again every
// fin_stall_look.  A peer that took some of them, or a window that is open
// (octets in flight, unacknowledged: loss and congestion, TCP's business)
// is progress.  A look that finds the same octets unsent and nothing in
// flight means the peer took nothing for a whole fin_stall_look with its
// window closed: the close becomes abortive (RST, ERR, queues flushed,
// DISCONNECTED), which a parked peer hears at once (a hang-up needs no
// window).  The octets lost are those of Sends the peer would have failed
// anyway at its deadline -- or, with a peer that merely stopped reading for
// that long, what a graceful close could not have delivered either.
// Hardware RNICs bound their close handshake the same way (an abort after
// an endpoint timeout).
#include <linux/sockios.h>
#include <sys/ioctl.h>

#include "emulator/emulator.h"
#include "emulator/engine.h"
#include "emulator/base/log.h"
#include "emulator/qp/qp.h"

namespace iwemu {

namespace {

// Longer than any scheduling gap of a live peer on a loaded host, shorter
// than the default rnr_wait_ms (3 s), so a close never waits for the peer's.
constexpr auto fin_stall_look = std::chrono::milliseconds(1000);

// Octets TCP holds not yet sent (SIOCOUTQNSD), and all it holds, sent but
// unacknowledged included (SIOCOUTQ).  False when the socket cannot say.
bool send_queue_octets(int fd, int* unsent, int* held)
{
    return ::ioctl(fd, SIOCOUTQNSD, unsent) == 0 && ::ioctl(fd, SIOCOUTQ, held) == 0;
}

}  // namespace

// sq_lock_ held, right after shutdown(SHUT_WR).
void QueuePair::fin_stall_arm_locked()
{
    int unsent = 0, held = 0;
    if (!send_queue_octets(fd_.load(std::memory_order_relaxed), &unsent, &held) || unsent <= 0)
        return;  // the FIN goes out behind what is in flight: nothing to watch
    conn_.fin_stall_unsent = unsent;
    conn_.fin_stall_next = std::chrono::steady_clock::now() + fin_stall_look;
    emu_.engine().schedule_timer(qp_num_, conn_.fin_stall_next);
}

// rx_lock_ + sq_lock_ held, from on_timer.
void QueuePair::fin_stall_check_locked()
{
    if (conn_.fin_stall_unsent == 0) return;  // not watching
    const int fd = fd_.load(std::memory_order_relaxed);
    // The peer's FIN or RST, a Terminate, an abort or destroy ended the close.
    if (fd < 0 || destroyed_ || state_.load(std::memory_order_relaxed) != QpState::sqd) {
        conn_.fin_stall_unsent = 0;
        return;
    }
    const auto now = std::chrono::steady_clock::now();
    if (now < conn_.fin_stall_next) {  // the receive path's timer came first
        emu_.engine().schedule_timer(qp_num_, conn_.fin_stall_next);
        return;
    }
    int unsent = 0, held = 0;
    if (!send_queue_octets(fd, &unsent, &held) || unsent <= 0) {
        conn_.fin_stall_unsent = 0;  // everything, the FIN with it, has left
        return;
    }
    const bool in_flight = held > unsent;
    if (unsent < conn_.fin_stall_unsent || in_flight) {
        conn_.fin_stall_unsent = unsent;
        conn_.fin_stall_next = now + fin_stall_look;
        emu_.engine().schedule_timer(qp_num_, conn_.fin_stall_next);
        return;
    }
    IWEMU_LOG(info,
              "qp %u: disconnect: the peer's window stayed closed for %lld ms with %d octets and our FIN "
              "unsent: dropping the connection",
              qp_num_, static_cast<long long>(fin_stall_look.count()), unsent);
    conn_.fin_stall_unsent = 0;
    count(counters_.fin_stall_drops);
    drop_connection_locked();
}

}  // namespace iwemu
