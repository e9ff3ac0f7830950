// Posted work requests that join a send backlog (Config::tx_coalesce).
//
// A QP sends what is posted at once, in the posting thread (tx_engine.cpp),
// all of it in one sendmsg(): a list of work requests in one post leaves
// together.  When TCP has pushed back -- part of a batch is still unsent
// and the engine watches the socket for EPOLLOUT -- a post can only add to
// that backlog: it joins it without a system call (which would mostly fail
// with EAGAIN), and the engine sends the whole backlog, in as few calls as
// it takes, once the socket has room again.  A poll of the QP's CQs
// leaves it to EPOLLOUT too (try_tx_progress).
//
// The rule: a posted work request never waits for an event that may not
// come.  EPOLLOUT comes for as long as the connection lives, and until it
// does nothing could leave anyway.  Nothing is held back on a guess that
// the application will poll, arm or post again soon: the first version of
// this file held posts for a batch after 8 in a row, with an engine timer
// as the safety net, and an application that then spun on memory or slept
// on a CQ armed before posting waited ~1.2 ms every round trip; handing the
// burst to the engine thread at once instead cost milliseconds whenever
// that thread waited for a CPU (docs/performance.md, fifteenth session).
#include "emulator/emulator.h"
#include "emulator/qp/qp.h"

namespace iwemu {

// sq_lock_ held, after posting.
void QueuePair::tx_posted_locked()
{
    if (emu_.config().tx_coalesce && tx_pushed_back_locked()) return;  // the engine sends it with the backlog
    tx_locked();
}

// A batch partly written and the engine waiting for room: TCP pushed back.
bool QueuePair::tx_pushed_back_locked() const
{
    return tx_.iov_count > 0 && epollout_;
}

}  // namespace iwemu
