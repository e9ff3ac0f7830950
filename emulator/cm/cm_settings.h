// Connection-setup policy: what this end asks for in MPA startup and what it
// accepts.  Defaults interoperate with Linux siw and hardware RNICs
// (DESIGN.md "Wire defaults"; CHECKLIST decisions 1, 5, 6, 8, 9).
#pragma once

#include <array>
#include <chrono>
#include <cstdint>
#include <string_view>

#include "emulator/base/connection_params.h"

namespace iwemu::cm {

// How the Initiator asks for a ready-to-receive signal.
enum class PeerToPeerMode : uint8_t {
    off,      // client/server: RFC 6581 A=0 (or plain Rev 1)
    rfc6581,  // RFC 6581 A=1 with B/C/D flags; the RTR is the Initiator's first FPDU (QP's job)
    seed002,  // 2007 proposal: Rev 1, S=1, a 20-octet Rtr startup frame (iwemu peers only, P2P-025)
};

// RTR message types this end can send (Initiator) or absorb (Responder).
struct RtrTypes {
    bool zero_length_send = false;  // B: off by default (siw never offers or accepts it)
    bool zero_length_write = true;  // C
    bool zero_length_read = true;   // D
    // Order in which an end picks among the types both allow (the Initiator
    // from the Reply, the Responder from the Request).  D first: its
    // Response shows the Initiator that the Responder reads its stream
    // (emulator/qp/first_fpdus.cpp); then decision 8's C, B.
    std::array<RtrType, 3> preference{RtrType::zero_length_read, RtrType::zero_length_write,
                                      RtrType::zero_length_send};

    bool any() const { return zero_length_send || zero_length_write || zero_length_read; }
    bool allows(RtrType t) const
    {
        return (t == RtrType::zero_length_send && zero_length_send) ||
               (t == RtrType::zero_length_write && zero_length_write) ||
               (t == RtrType::zero_length_read && zero_length_read);
    }
};

// A configured list ("read,write", Config::rtr_types): the types it names,
// preferred in its order.  "none" or an empty list names none.
RtrTypes rtr_types_from_list(std::string_view list);

struct CmSettings {
    // Rev sent as Initiator (2 = RFC 6581 enhanced, 1 = RFC 5044); as Responder
    // the highest revision accepted (a Rev 2 Request to a Rev-1-only responder
    // is closed, RFC 6581 §10).
    // 0: behave as an "upgraded RDMAC RNIC" (RFC 5044 Appendix C): Rev 0
    // Request/Reply with M=1 C=1, then DDP/RDMAP version 0, markers and CRC
    // both ways; as Responder every Request gets a Rev 0 Reply.
    uint8_t mpa_revision = 2;
    // Permissive (RFC 5044 Appendix C): a Rev 0 Request is accepted with a
    // Rev 0 Reply, a Rev 0 Reply to our Request is followed, both switching
    // the connection to version 0 with markers and CRC.  false: a Rev 0
    // Request gets a Rev 1 Reply with R=1 and is closed; a Rev 0 Reply closes.
    bool accept_rev0 = true;
    // Initiator: draft-03 startup (seed 000 §8.1): a "Start Key" instead of
    // the Request/Reply frames, DDP/RDMAP version 0, no Private Data
    // (start_key_startup.h).  A Responder answers a Start Key with one when
    // this or accept_rev0 is set; RFC 5044 Requests it judges as usual.
    bool start_key = false;
    // C bit we send.  false only when an administrator asked for no CRC
    // (RFC 5044 §4.4); a peer's C=1 is always honoured (CRC both ways).
    bool crc = true;
    // M bit we send: markers wanted in what the peer sends (off: siw refuses M=1).
    bool markers = false;
    PeerToPeerMode peer_to_peer = PeerToPeerMode::rfc6581;
    RtrTypes rtr;
    // Whole startup exchange (TCP connect, Request, Reply, seed-002 Rtr frame)
    // must finish within this time (RFC 5044 §7.1.2 rules 8, 10; siw uses 5 s / 10 s).
    std::chrono::milliseconds mpa_timeout{5000};
    // Reconnects of an active connection whose peer closed or reset it
    // before sending any octet of its Reply: what a port forwarder (qemu's
    // slirp, an SSH tunnel, a container proxy) shows when it accepted for a
    // server that is not listening (yet), e.g. perftest -R re-creating its
    // listener.  Within mpa_timeout, after 10, 20, 40 ... ms (at most
    // 160).  0: fail at once with ECONNRESET, as kernel iw_cm does.
    unsigned connect_retries = 10;
    // Connections a listener keeps in startup before their MPA Request is
    // complete (awaiting_request).  At the cap a newly accepted connection
    // evicts the oldest of them (closed abortively, never seen by the ULP),
    // so silent connections cannot keep real clients out for an MPA timeout
    // each.  At least 1 (Config key max_half_open, IWEMU_MAX_HALF_OPEN).
    unsigned max_half_open_per_listener = 64;
    // ... but only once the oldest has waited this long for its Request.
    // Until then new connections wait in the kernel's accept queue: a burst
    // of real clients whose Requests are merely late (a loaded machine)
    // must not evict each other.  Silent connections still cannot hold the
    // listener: each is closed after its grace when newer ones wait.
    std::chrono::milliseconds half_open_grace{250};
    // Largest PD_Length (RFC 6581 enhanced data included) this end sends.
    // RFC 5044 allows 512, but Linux siw drops a frame above 256 (CHECKLIST
    // MPA-058), so 256 unless every peer is known to take more.  Received
    // frames may always carry 512.
    uint16_t max_sent_pd_length = 256;
    // Device limits for RFC 6581 §9.1 IRD/ORD adjustment.
    uint16_t max_ird = 128;
    uint16_t max_ord = 128;
};

}  // namespace iwemu::cm
