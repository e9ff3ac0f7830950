// A graceful close's FIN held back a little after the peer's last message.
//
// Linux siw fails a work request whose octets have all left when the
// peer's FIN or RST is processed before its TX thread has finished with it:
// after a segment went out, siw_qp_sq_proc_tx checks tx_suspend (set by
// siw_qp_llp_close when the peer closes) before it checks for the last
// segment, so the WR completes with LOC_QP_OP_ERR although the peer has it.
// perftest's closing exchange hits it: the siw side's last Send reaches us,
// we answer and close, and its Send "fails".  The window is that of siw's
// TX thread getting the CPU back: ~12 ms on a loaded qemu guest.  So our FIN
// goes no earlier than Config::close_grace_ms after the last message the
// peer sent (none: at once).  The application is not held up: disconnect
// and destroy return at once, the engine sends the FIN when due (for a
// destroyed QP, Engine::linger_close).  A process that exits within the
// grace waits for its end before it closes (Emulator::close_at_exit): the
// kernel would otherwise send every FIN at once -- perftest destroys its
// control QP and exits a millisecond after the siw side's last Send.
#include <time.h>

#include "emulator/emulator.h"
#include "emulator/engine.h"
#include "emulator/qp/qp.h"

namespace iwemu {

// A coarse clock (a few ns, no syscall): the grace is milliseconds.
static int64_t coarse_now_ns()
{
    timespec ts;
    clock_gettime(CLOCK_MONOTONIC_COARSE, &ts);
    return int64_t{ts.tv_sec} * 1'000'000'000 + ts.tv_nsec;
}

// rx_lock_ held: a message of the peer ended here.
void QueuePair::note_peer_message()
{
    conn_.rx_last_message_ns.store(coarse_now_ns(), std::memory_order_relaxed);
}

std::optional<Engine::Clock::time_point> QueuePair::fin_grace_end() const
{
    const int64_t last = conn_.rx_last_message_ns.load(std::memory_order_relaxed);
    const uint32_t grace_ms = emu_.config().close_grace_ms;
    if (last == 0 || grace_ms == 0) return std::nullopt;
    const int64_t left_ns = last + int64_t{grace_ms} * 1'000'000 - coarse_now_ns();
    if (left_ns <= 0) return std::nullopt;
    return Engine::Clock::now() + std::chrono::nanoseconds(left_ns);
}

// sq_lock_ held, where a disconnect's FIN would go: false (and the timer
// set) while the grace lasts.
bool QueuePair::fin_may_go_locked()
{
    const auto end = fin_grace_end();
    if (!end) return true;
    emu_.engine().schedule_timer(qp_num_, *end);
    return false;
}

}  // namespace iwemu
