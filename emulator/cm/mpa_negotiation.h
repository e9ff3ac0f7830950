// MPA startup negotiation as pure functions: which Request the Initiator
// sends, how a Responder judges a Request and builds its Reply, and what the
// Initiator concludes from the Reply.  No I/O; the CM state machine
// (connection_manager.cpp) feeds received frames in and writes the results.
//
// Rules (RFC 5044 §7.1.1-§7.1.2, RFC 6581 §6, §9; CHECKLIST decisions):
// - CRC: C=1 in either frame => CRC generated and checked both ways.
// - Markers: Request M => the Responder inserts markers; Reply M => the
//   Initiator does.  Per direction.
// - Revision: a Rev 2 Request with S=1 gets an enhanced Rev 2 Reply; Rev 1
//   (or Rev 2 with S=0, decision 13) gets a plain Rev 1 Reply.  A revision
//   above CmSettings::mpa_revision is refused (closed, RFC 6581 §10).
// - Rev 0 (RDMA Consortium, RFC 5044 Appendix C, MPA-057): permissive by
//   default (CmSettings::accept_rev0): a Rev 0 Request gets a Rev 0 Reply, a
//   Rev 0 Reply is followed, and the connection runs DDP/RDMAP version 0
//   with markers and CRC both ways.  Non-permissive: Rev 1 Reply with R=1
//   (then close), and a Rev 0 Reply closes.  With mpa_revision 0 this end
//   is the "upgraded RDMAC RNIC": Rev 0 Request, Rev 0 Reply to anything.
// - RTR: among the types both ends allow, the first in RtrTypes::preference
//   (default C Write, D Read, B Send: decision 8).  The Responder flags exactly the chosen one; with no
//   common type it rejects (R=1, its supported types flagged, decision 13).
//   The Initiator likewise picks C, D, B from the Reply; with none it sends
//   Terminate LLP/MPA/0x07 (RFC 6581 §9.2).
// - IRD/ORD (RFC 6581 §9.1): Responder ORD <= Initiator IRD; Responder IRD
//   is its own (raised to 1 for a Read RTR); Initiator ORD <= Responder IRD;
//   Initiator IRD raised to the Responder's ORD up to CmSettings::max_ird,
//   else Terminate LLP/MPA/0x06.  0x3FFF = "not negotiated": keep the local
//   value and answer 0x3FFF.
// - Seed-002 mode (configuration only): Rev 1 Request with S=1; a Responder
//   in that mode answers S=1 and waits for the Rtr frame; the Initiator sends
//   the Rtr frame only after an accepting Reply with S=1.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string_view>

#include "emulator/cm/cm_settings.h"
#include "emulator/base/connection_params.h"
#include "emulator/wire/mpa_frame.h"
#include "emulator/wire/terminate_codes.h"

namespace iwemu::cm {

// Initiator: the Request for these settings.  frame.private_data is left
// empty; the caller attaches the ULP private data.
wire::MpaFrame make_request(const CmSettings& settings, uint16_t ird, uint16_t ord);

// Largest ULP private data a frame of this kind can carry (RFC 5044 §7.1.1).
constexpr size_t max_ulp_private_data(bool enhanced)
{
    return wire::mpa_max_pd_length - (enhanced ? wire::mpa_enhanced_data_size : 0);
}

// Largest ULP private data we put in a frame of this kind under `settings`
// (CmSettings::max_sent_pd_length, never above the RFC limit).
size_t max_sent_ulp_private_data(const CmSettings& settings, bool enhanced);

// Responder: what a well-formed Request asks for.
struct RequestAssessment {
    enum class Verdict : uint8_t {
        offer_to_ulp,   // hand to the ULP (connect_request)
        reject,         // answer R=1 ourselves (no common RTR type)
        close,          // unsupported revision: close without a Reply
    };
    Verdict verdict = Verdict::offer_to_ulp;
    std::string_view reason;      // for reject / close
    uint8_t reply_revision = 1;
    bool rdmac = false;           // Rev 0 connection: version 0, markers and CRC both ways
    bool enhanced = false;        // Reply carries RFC 6581 enhanced data
    bool peer_to_peer = false;    // A=1 requested (RFC 6581)
    bool seed002_rtr = false;     // seed-002: Reply S=1, then wait for the Rtr frame
    RtrType rtr = RtrType::none;  // chosen RTR (RFC 6581 peer-to-peer)
    bool crc = true;              // CRC both ways
    bool request_markers = false; // Request M: we (Responder) send markers
    uint16_t peer_ird = wire::mpa_ird_ord_no_negotiation;
    uint16_t peer_ord = wire::mpa_ird_ord_no_negotiation;
};

RequestAssessment assess_request(const CmSettings& settings, const wire::MpaFrame& request);

// Responder: the accepting Reply (private_data left empty) and the QP's
// parameters (fd and mulpdu left for the caller).
struct AcceptPlan {
    wire::MpaFrame reply;
    ConnectionParams params;
};
AcceptPlan plan_accept(const CmSettings& settings, const RequestAssessment& request,
                       uint16_t local_ird, uint16_t local_ord);

// Responder: a rejecting Reply (R=1) for this Request (private_data empty).
wire::MpaFrame make_reject(const CmSettings& settings, const RequestAssessment& request);

// Initiator: the outcome of a well-formed Reply.
struct ReplyOutcome {
    enum class Verdict : uint8_t {
        established,  // hand params to the QP (after the Rtr frame in seed-002 mode)
        rejected,     // R=1
        terminate,    // send a Terminate with `error`, then close
        close,        // malformed for this Request (MPA error 4): close
    };
    Verdict verdict = Verdict::established;
    std::string_view reason;
    std::optional<wire::TerminateCode> error;
    bool send_rtr_frame = false;  // seed-002
    ConnectionParams params;      // established (fd, mulpdu left for the caller)
};
ReplyOutcome evaluate_reply(const CmSettings& settings, const wire::MpaFrame& request,
                            const wire::MpaFrame& reply, uint16_t local_ird, uint16_t local_ord);

// Seed-002 Rtr frame (WIRE.md §4): key as printed, C as in the Reply, S=0, Rev 1, no PD.
wire::MpaFrame make_rtr_frame(bool reply_crc);

}  // namespace iwemu::cm
