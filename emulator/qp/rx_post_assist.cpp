// A posting thread runs the receive path the engine has left idle.
//
// What arrives on a QP is read by the engine thread (EPOLLIN), by a thread
// that busy-polls an empty CQ (rx_poll_owner.cpp) or by one that sleeps for
// a completion event (rx_event_waiter.cpp).  An application that keeps
// posting does none of the last two: perftest's ib_send_bw -e client posts,
// takes the event its own Sends raised (already there, so it never sleeps)
// and polls a CQ that is never empty.  When the engine thread then gets no
// CPU -- two busy application threads on a 2-core machine, or a loaded
// host -- the peer's RDMA Writes into that application's memory wait in the
// socket.  A kernel RNIC would have placed them long before: ib_send_bw's
// client read a credit of 0 for a whole run, stopped one message short and
// slept for a completion that could never come.
//
// So every RxOwnership::assist_every_posts posts the posting thread looks
// whether any receive pass read the socket since its last look; after
// assist_after_ns without one it runs a pass itself.  A healthy engine
// reads far more often than that, so the look costs a counter compare and,
// now and then, a clock read; a QP that receives nothing pays one recv() a
// millisecond at most.
#include "emulator/cq.h"
#include "emulator/qp/qp.h"

namespace iwemu {

bool QueuePair::rx_assist_due_locked()
{
    return rx_owner_.assist_look_due() &&
           rx_owner_.assist_due(counters_.rx_syscalls.load(std::memory_order_relaxed), CompletionQueue::now_ns());
}

}  // namespace iwemu
