// What MPA startup (emulator/cm) hands to a QP's data path when a connection
// reaches Full Operation.  The contract between connection setup and the
// TX/RX engine: the CM owns the TCP socket until the MPA Request/Reply (and,
// in seed-002 mode, the Rtr frame) are exchanged; the QP owns it afterwards
// and never reads a startup frame.
#pragma once

#include <cstdint>

namespace iwemu {

enum class ConnectionRole : uint8_t { initiator, responder };

// RFC 6581 ready-to-receive message the Initiator sends as its first FPDU
// (§3 and §9.2); none in client/server mode or with a Rev 1 peer.
enum class RtrType : uint8_t {
    none,
    zero_length_send,   // B flag
    zero_length_write,  // C flag
    zero_length_read,   // D flag
};

// Framing negotiated for one direction of the stream (RFC 5044 §7.1.1 M and C bits).
struct StreamFraming {
    bool crc = true;       // FPDUs of this direction carry a checked CRC-32C
    bool markers = false;  // markers every 512 octets from SeqStart of this direction
};

struct ConnectionParams {
    int fd = -1;                    // connected TCP socket; ownership passes to the QP
    ConnectionRole role = ConnectionRole::initiator;
    uint8_t mpa_revision = 2;
    // DDP DV and RDMAP RV of every FPDU both ways: 1, or 0 when MPA startup
    // switched to RDMA Consortium (Rev 0) behaviour (RFC 5044 Appendix C).
    uint8_t ddp_rdmap_version = 1;
    StreamFraming tx;               // what we send
    StreamFraming rx;               // what the peer sends
    RtrType rtr = RtrType::none;    // peer-to-peer: initiator sends it, responder absorbs it
    uint16_t ird = 0;               // inbound Read queue depth granted to the peer
    uint16_t ord = 0;               // outbound Read Requests we may have in flight
    uint32_t mulpdu = 0;            // largest ULPDU we send (RFC 5044 §4.3), from TCP_MAXSEG
                                    // (0: the QP computes it from TCP_MAXSEG and tx.markers)
    // mulpdu stays as given.  Otherwise it follows the connection's EMSS as
    // TCP reports it (RFC 5044 §4.5: "the MULPDU value is changed accordingly").
    bool mulpdu_fixed = false;
    // Responder only: the Initiator's go-ahead already arrived during startup
    // (seed-002 Rtr frame mode), so the QP may send before the first inbound
    // FPDU.  Otherwise a Responder sends nothing until the Initiator's first
    // FPDU has arrived (RFC 5044 §7.1.2 rule 4).
    bool responder_may_send_first = false;
    // Connected by modify_qp(RTR) (qp_endpoint.h): the application expects
    // InfiniBand teardown, where a QP never sees its peer's destroy.  An
    // orderly close (FIN) by the peer then leaves posted receives pending
    // instead of flushing them (the SQ is still flushed; RST/errors flush all).
    bool keep_rq_on_peer_close = false;
};

}  // namespace iwemu
