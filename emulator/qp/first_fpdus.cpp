// The first FPDUs of a connection: when a Responder may send its first,
// and the wake-up of a peer that left them unread.
//
// The Responder's wait.  RFC 5044 §7.1.2 rule 4: a Responder sends no FPDU
// before it has received and validated one from the Initiator, so that
// FPDUs never reach an Initiator still reading the Reply (Linux siw as
// Initiator fails the connection when octets follow the Reply before it
// has read it: siw_recv_mpa_rr).  In client/server mode an Initiator may
// send nothing first -- siw's default -- and a server that speaks first
// (ib_write_lat) then waits forever.  So the Responder waits for the
// Initiator's first FPDU at most Config::responder_wait_ms, then sends:
// by then the Initiator has read a Reply that reached it that long ago.
//
// The wake-up.  Linux siw (5.3 and later) hands its socket's data-ready
// callback from its CM to its QP only after it has sent its Reply
// (siw_accept: siw_send_mpareqrep, then siw_sk_assign_rtr_upcalls or
// siw_qp_socket_assoc) or, as Initiator, processed ours.  Octets arriving
// in between are signalled to the CM's callback, which ignores them in
// RDMA mode, and nothing reads them until the next segment arrives.  On a
// cold or loaded siw host that window lasts milliseconds: an RTR and a
// Send lost in it leave both sides waiting, and in peer-to-peer mode siw's
// iw_cm stays in CONN_RECV, where a FIN crashes the kernel (iwcm.c,
// cm_close_handler: BUG).  So an end that has sent FPDUs follows them with
// zero-length RDMA Writes -- FPDUs without effect at the Data Sink, whose
// STag and TO are not checked (RFC 5041 §5.2, RFC 5040 §5.1) -- at
// wakeup_delays after the connection came up (for a Responder: after its
// wait ended), until the peer shows it has read our stream: the Response to
// a Read RTR, or its first FPDU when it cannot have sent that before its QP
// took the socket -- an Initiator's, or a Responder's to a peer-to-peer
// Initiator (it sends none before our RTR).  Between two iwemu ends the Read
// RTR's Response comes back within a round trip, so a wake-up is sent only
// when that takes longer than the first delay (a loaded host).
#include "emulator/emulator.h"
#include "emulator/engine.h"
#include "emulator/base/log.h"
#include "emulator/qp/qp.h"

namespace iwemu {

namespace {

// Each beyond the window seen on a cold TCG guest (~10 ms) by a wide margin.
constexpr std::array<std::chrono::milliseconds, 4> wakeup_delays{
    std::chrono::milliseconds(2), std::chrono::milliseconds(8), std::chrono::milliseconds(32),
    std::chrono::milliseconds(128)};

}  // namespace

// sq_lock_ held, from attach_connection: the connection's first moment.
void QueuePair::first_fpdus_arm_locked()
{
    const Config& cfg = emu_.config();
    const auto now = std::chrono::steady_clock::now();
    conn_.wakeup_step = 0;
    conn_.wakeup_pending_tx = false;
    conn_.wakeup_state = cfg.peer_wakeup ? PeerWakeup::scheduled : PeerWakeup::done;
    conn_.wakeup_epoch = now;
    conn_.tx_gate_deadline.reset();
    if (!conn_.tx_gate_open) {
        // Responder: the wake-ups count from the end of the wait.
        if (conn_.wakeup_state == PeerWakeup::scheduled) conn_.wakeup_state = PeerWakeup::after_gate;
        // A peer-to-peer Initiator always sends its RTR: wait for it (RFC 6581 §9.2).
        if (conn_.params.rtr == RtrType::none) {
            conn_.tx_gate_deadline = now + std::chrono::milliseconds(cfg.responder_wait_ms);
            emu_.engine().schedule_timer(qp_num_, *conn_.tx_gate_deadline);
        }
    }
    if (conn_.wakeup_state == PeerWakeup::scheduled) emu_.engine().schedule_timer(qp_num_, now + wakeup_delays[0]);
}

// sq_lock_ held: the peer has shown that it reads what we send.
void QueuePair::peer_read_our_stream_locked()
{
    conn_.wakeup_state = PeerWakeup::done;
    conn_.wakeup_pending_tx = false;
}

// sq_lock_ held: the Responder's wait ended, at the Initiator's first FPDU
// (rx_engine) or at its deadline (the timer).
void QueuePair::open_tx_gate_locked()
{
    conn_.tx_gate_open = true;
    conn_.tx_gate_deadline.reset();
}

// rx_lock_ + sq_lock_ held, from on_timer.
void QueuePair::first_fpdus_timer_locked()
{
    if (fd_.load(std::memory_order_relaxed) < 0 || conn_.tx_stopped || conn_.closing) return;
    const auto now = std::chrono::steady_clock::now();
    if (conn_.tx_gate_deadline) {
        if (now < *conn_.tx_gate_deadline) {
            emu_.engine().schedule_timer(qp_num_, *conn_.tx_gate_deadline);
            return;
        }
        IWEMU_LOG(debug, "qp %u: no FPDU from the Initiator within %u ms: sending first", qp_num_,
                  emu_.config().responder_wait_ms);
        open_tx_gate_locked();
        if (conn_.wakeup_state == PeerWakeup::after_gate) {
            conn_.wakeup_state = PeerWakeup::scheduled;
            conn_.wakeup_epoch = now;
            emu_.engine().schedule_timer(qp_num_, now + wakeup_delays[0]);
        }
        tx_locked();
        return;
    }
    if (conn_.wakeup_state != PeerWakeup::scheduled) return;
    const auto due = conn_.wakeup_epoch + wakeup_delays[conn_.wakeup_step];
    if (now < due) {
        emu_.engine().schedule_timer(qp_num_, due);
        return;
    }
    // Only what we sent can have been missed; the first FPDU after the
    // window is read at once, whenever it comes.
    if (counters_.tx_fpdus.load(std::memory_order_relaxed) > 0) {
        conn_.wakeup_pending_tx = true;
        tx_locked();
    }
    if (++conn_.wakeup_step == wakeup_delays.size()) {
        conn_.wakeup_state = PeerWakeup::done;
        return;
    }
    emu_.engine().schedule_timer(qp_num_, conn_.wakeup_epoch + wakeup_delays[conn_.wakeup_step]);
}

// sq_lock_ held, from tx_build_next_locked at a message boundary.
bool QueuePair::tx_build_wakeup_locked()
{
    wire::DdpHeader h;
    h.control.dv = wire::ddp_version;
    h.control.tagged = true;
    h.control.last = true;
    h.rsvdulp0 = wire::encode_rdmap_control(wire::RdmapOpcode::rdma_write);
    uint8_t hdr[wire::ddp_tagged_header_size];
    const size_t n = wire::encode_ddp_header(h, hdr);
    if (!tx_build_control_locked(TxSlot::Action::none, {hdr, n})) return false;
    conn_.wakeup_pending_tx = false;
    count(counters_.tx_wakeups);
    return true;
}

}  // namespace iwemu
