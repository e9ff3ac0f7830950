// Posted work requests gathered into one sendmsg() (Config::tx_coalesce).
//
// A QP sends what is posted at once, in the posting thread (tx_engine.cpp).
// For a small message the cost is that one sendmsg() -- on loopback it also
// runs the receiving side's TCP -- so an application that streams small
// messages, perftest's bandwidth loop for one (post up to tx_depth, then
// poll), is bound by a system call per message.  When posts come in a row
// (each within Config::tx_coalesce_gap_ns of the one before, no poll of the
// QP's CQs and nothing received on the QP between them), the first
// tx_coalesce_after go out one by one as ever; after them, work requests
// wait until a batch is full (tx_slots requests, or tx_batch_bytes) and go
// out together.  Whatever still waits leaves at the first of:
//   * a poll that finds a CQ empty (CompletionQueue::poll drives every QP of
//     a process with few QPs): an application that wants a completion or a
//     reply polls;
//   * ibv_req_notify_cq on a CQ the QP feeds: it is about to sleep;
//   * the engine timer, tx_coalesce_wait after the first request held back:
//     an application that waits without verbs calls (spinning on memory a
//     peer's RDMA Write fills) is delayed by that much at most.
// A ping-pong (one post, then a poll or the peer's reply) or a sender
// pacing its posts never holds anything back.  Only a process with few QPs
// coalesces: there every empty poll reaches every QP.
#include "emulator/cq.h"
#include "emulator/emulator.h"
#include "emulator/engine.h"
#include "emulator/qp.h"

namespace iwemu {

// sq_lock_ held, after posting.  A burst: posts each within
// Config::tx_coalesce_gap_ns of the one before, no poll of the QP's CQs and
// no FPDU received on the QP since the first.  A sender that paces its
// posts, or polls between them, never has one; nor does a ping-pong whose
// application waits for the reply without a verbs call (ib_write_lat spins
// on the memory the peer's Write fills): where a round trip is shorter than
// the gap, its posts would otherwise come "in a row", and one of them would
// wait for the engine timer.  The clock is read only from a burst's second
// post on: a ping-pong pays nothing.
void QueuePair::tx_posted_locked(uint64_t posted_length)
{
    if (!emu_.config().tx_coalesce) {
        tx_locked();
        return;
    }
    uint64_t polls = init_.send_cq ? init_.send_cq->poll_calls() : 0;
    if (init_.recv_cq && init_.recv_cq != init_.send_cq) polls += init_.recv_cq->poll_calls();
    const uint64_t received = counters_.rx_fpdus.load(std::memory_order_relaxed);
    if (polls != tx_burst_poll_mark_ || received != tx_burst_rx_mark_) {
        tx_burst_poll_mark_ = polls;
        tx_burst_rx_mark_ = received;
        tx_burst_posts_ = 1;
        tx_last_post_ns_ = no_post_time;
        tx_locked();
        return;
    }
    const int64_t now = CompletionQueue::now_ns();
    if (tx_last_post_ns_ != no_post_time && now - tx_last_post_ns_ > emu_.config().tx_coalesce_gap_ns)
        tx_burst_posts_ = 0;
    if (++tx_burst_posts_ > tx_coalesce_after && tx_coalesce_locked(posted_length)) {
        tx_last_post_ns_ = now;
        return;
    }
    tx_locked();
    // From the end of the send: the next post of a loop follows it closely
    // however long the sendmsg() took.
    tx_last_post_ns_ = CompletionQueue::now_ns();
}

bool QueuePair::tx_coalesce_locked(uint64_t posted_length)
{
    // A send path that is busy anyway (half a batch in the socket, the
    // engine pushing a backlog) or closing keeps its usual course.
    if (iov_count_ > 0 || epollout_ || tx_stopped_ || closing_ || state_.load() != QpState::rts) return false;
    tx_coalesced_bytes_ += posted_length;
    if (sq_tail_ - sq_tx_ >= tx_slots || tx_coalesced_bytes_ >= tx_batch_bytes) return false;  // a batch: send it
    if (!emu_.has_few_qps()) return false;
    if (!tx_coalesced_.load(std::memory_order_relaxed)) {
        tx_coalesced_.store(true, std::memory_order_relaxed);
        emu_.engine().schedule_timer(qp_num_, Engine::Clock::now() + tx_coalesce_wait);
    }
    return true;
}

void QueuePair::send_coalesced_tx()
{
    // A thread holding sq_lock_ sends it, or the timer does.
    if (tx_coalesced_.load(std::memory_order_relaxed)) try_tx_progress();
}

}  // namespace iwemu
