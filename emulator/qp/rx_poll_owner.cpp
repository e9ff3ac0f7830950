// Poll ownership of the receive path.
//
// An application thread spinning in ibv_poll_cq already runs the receive
// path of the CQ's QPs on every empty poll (cq.cpp).  While the engine
// thread also waits for EPOLLIN, every arriving FPDU wakes it: it preempts
// the polling thread (on a 2-core machine usually the same core), mostly to
// find the octets already read, and the two context switches cost more than
// the whole receive.  So a poller that keeps finding nothing takes the
// socket's read interest away from the engine and is then the only reader.
//
// The engine must get it back whenever the application may stop polling
// and still expect progress (Read Responses to send, RDMA Writes to place
// into memory it spins on, completions it sleeps for):
//   - req_notify hands it back (the application is about to sleep), and
//     no poll takes it again until the requested event has fired;
//   - the engine's lease check hands back what nobody polled for a tick
//     (an application that gave up polling without either; not a poller
//     that only waited for its CPU, poller_waits_for_cpu), and the CQs of
//     such a QP take nothing for a while (a loop that polls once and then
//     waits on memory would otherwise pay a tick every iteration);
//   - a QP that stays quiet goes back too, and empty polls stop reading it
//     (poll_rx_wanted).
// A poll that returns completions keeps it: handing it back and taking it
// again cost two epoll_ctl() per message, one of them between the arrival
// and the application's answer.
// While owned the socket is in no epoll set unless the engine still needs
// it for EPOLLOUT (a send backlog) or an RNR-parked receiver's EPOLLRDHUP
// (RxOwnership::engine_events): the poller's recv() sees data, FIN and
// errors itself, and a registered socket costs every message an epoll
// callback in the peer's sendmsg().
#include "emulator/emulator.h"
#include "emulator/engine.h"
#include "emulator/base/log.h"
#include "emulator/qp/qp.h"
#include "emulator/qp/rx_ownership.h"
#include "emulator/thread_cpu_state.h"

namespace iwemu {

void QueuePair::poll_take_rx(int64_t now_ns)
{
    if (poll_rx_quiet(now_ns)) return;  // stays with the engine (poll_rx_wanted handed it back)
    if (rx_owner_.owned()) {
        rx_owner_.note_poll();  // any change tells the lease check the poller is still there
        return;
    }
    // Nothing is taken while the application sleeps on an armed CQ, nor soon
    // after a lapse (cq.h).
    if (init_.send_cq && !init_.send_cq->lends_rx(now_ns)) return;
    if (init_.recv_cq && init_.recv_cq != init_.send_cq && !init_.recv_cq->lends_rx(now_ns)) return;
    std::unique_lock<std::mutex> g(sq_lock_, std::try_to_lock);
    if (!g.owns_lock()) return;  // busy: the next empty poll tries again
    if (fd_.load(std::memory_order_relaxed) < 0 || peer_fin_.load(std::memory_order_relaxed) || destroyed_)
        return;
    rx_owner_.apply(RxOwnership::ReaderEvent::poll_found_nothing);
    rx_owner_.set_poller(current_tid());
    apply_epoll_interest_locked();
    emu_.engine().poll_owner_add(qp_num_);
    IWEMU_LOG(debug, "qp %u: a polling thread takes the receive path", qp_num_);
}

void QueuePair::poll_return_rx()
{
    if (!rx_owner_.owned()) return;
    std::lock_guard<std::mutex> g(sq_lock_);
    if (rx_owner_.owned()) poll_release_rx_locked();
}

// sq_lock_ held, owned: the engine reads again.  Level-triggered EPOLLIN
// wakes it at once for octets that arrived meanwhile.
void QueuePair::poll_release_rx_locked()
{
    rx_owner_.apply(RxOwnership::ReaderEvent::hand_back);
    apply_epoll_interest_locked();
    emu_.engine().poll_owner_remove(qp_num_);
}

bool QueuePair::poll_rx_wanted(int64_t now_ns)
{
    const bool wanted = rx_owner_.poll_wanted(counters_.rx_fpdus.load(std::memory_order_relaxed), now_ns);
    if (rx_owner_.owned()) {
        if (wanted) {
            rx_owner_.note_poll();  // driven by a poller: the lease holds, however long its polls take
        } else {
            poll_return_rx();  // quiet: nobody would read it, so the engine must
        }
    }
    return wanted;
}

bool QueuePair::poll_rx_quiet(int64_t now_ns) const
{
    return rx_owner_.quiet(counters_.rx_fpdus.load(std::memory_order_relaxed), now_ns);
}

void QueuePair::poll_lease_tick()
{
    std::unique_lock<std::mutex> g(sq_lock_);
    if (rx_owner_.reader() != RxOwnership::Reader::poller || destroyed_) {
        emu_.engine().poll_owner_remove(qp_num_);  // an entry of an earlier QP with this number, or handed back
        return;
    }
    // The poller is there while it polls, empty or not: its empty polls
    // count on the QP, and every poll of the QP's CQs counts there.  (The
    // CQs outlive the QP until destroy_qp returns, which sets destroyed_
    // under sq_lock_.)
    auto polls_now = [this] {
        return rx_owner_.poll_counts((init_.send_cq ? init_.send_cq->poll_calls() : 0) +
                                     (init_.recv_cq ? init_.recv_cq->poll_calls() : 0));
    };
    const RxOwnership::PollCounts polls = polls_now();
    if (!rx_owner_.lease_quiet_tick(polls)) return;
    // Look at the poller without sq_lock_: a poller about to post a work
    // request would sleep on it, and look as if it had walked away.
    g.unlock();
    const bool waits =
        rx_owner_.poller_waits_for_cpu(thread_cpu_state(rx_owner_.poller()), CompletionQueue::now_ns());
    g.lock();
    if (rx_owner_.reader() != RxOwnership::Reader::poller || destroyed_) return;
    if (waits || !(polls_now() == polls)) return;  // still there
    rx_owner_.lease_lapsed();
    count(counters_.rx_poll_lease_lapses);
    IWEMU_LOG(debug, "qp %u: poll lease lapsed: the engine receives again", qp_num_);
    poll_release_rx_locked();
    if (init_.send_cq) init_.send_cq->note_lease_lapse();
    if (init_.recv_cq) init_.recv_cq->note_lease_lapse();
}

}  // namespace iwemu
