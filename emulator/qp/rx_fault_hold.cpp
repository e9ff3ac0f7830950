// IWEMU_FAULTS delay / stall / late_read: the receive path stops reading
// its socket until the fault injector's hold is over (fault_injector.h).
//
// Parked the way the RNR wait parks (rx_rnr_wait.cpp): no EPOLLIN (level-
// triggered, it would spin), the engine's timer at the hold's end, event
// waiters leave the socket to the engine (RxOwnership::Pause::fault).  Nothing waits
// for an event that may never come: the timer runs the receive path again
// whatever the peer does.  The peer's FIN or RST during the hold ends it
// (EPOLLRDHUP stays armed and would otherwise spin): the stream is over,
// there is nothing left to pace.  Called only while capture::on(): with no
// rule the data path never gets here.
#include <poll.h>

#include "emulator/capture/stream_capture.h"
#include "emulator/emulator.h"
#include "emulator/engine.h"
#include "emulator/faults/fault_injector.h"
#include "emulator/base/log.h"
#include "emulator/qp/qp.h"

namespace iwemu {

// rx_lock_ held.  True: held, return without reading.
bool QueuePair::rx_fault_hold_locked(int fd)
{
    auto until = faults::rx_hold_until(fd);
    if (until && rx_fault_held_) {
        pollfd p{fd, POLLRDHUP, 0};
        if (::poll(&p, 1, 0) == 1 && (p.revents & (POLLRDHUP | POLLHUP | POLLERR))) {
            faults::rx_hold_release(fd);
            until.reset();
        }
    }
    if (!until) {
        if (rx_fault_held_) {
            rx_fault_held_ = false;
            IWEMU_LOG(debug, "qp %u: fault hold over: reading again", qp_num_);
            std::lock_guard<std::mutex> g(sq_lock_);
            rx_pause_locked(rx_rnr_parked_ ? RxOwnership::PauseEvent::fault_over_rnr
                                           : RxOwnership::PauseEvent::fault_over);
        }
        return false;
    }
    if (!rx_fault_held_) {
        rx_fault_held_ = true;
        std::lock_guard<std::mutex> g(sq_lock_);
        rx_pause_locked(RxOwnership::PauseEvent::fault_hold);
    }
    emu_.engine().schedule_timer(qp_num_, *until);
    return true;
}

}  // namespace iwemu
