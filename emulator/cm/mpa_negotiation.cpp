#include "emulator/cm/mpa_negotiation.h"

#include <algorithm>

namespace iwemu::cm {

namespace {

constexpr uint16_t not_negotiated = wire::mpa_ird_ord_no_negotiation;

uint16_t clamp14(uint16_t v) { return std::min<uint16_t>(v, wire::mpa_ird_ord_max); }

// The first type in our preference order (CmSettings: D zero-length Read,
// C zero-length Write, B Send by default) that both ends allow.
RtrType choose_rtr(bool send, bool write, bool read, const RtrTypes& allowed)
{
    RtrTypes offered;
    offered.zero_length_send = send;
    offered.zero_length_write = write;
    offered.zero_length_read = read;
    for (RtrType t : allowed.preference)
        if (offered.allows(t) && allowed.allows(t))
            return t;
    return RtrType::none;
}

void flag_rtr_types(wire::MpaEnhancedData& ed, const RtrTypes& types)
{
    ed.zero_length_send_rtr = types.zero_length_send;
    ed.zero_length_write_rtr = types.zero_length_write;
    ed.zero_length_read_rtr = types.zero_length_read;
}

void flag_rtr(wire::MpaEnhancedData& ed, RtrType rtr)
{
    ed.zero_length_send_rtr = rtr == RtrType::zero_length_send;
    ed.zero_length_write_rtr = rtr == RtrType::zero_length_write;
    ed.zero_length_read_rtr = rtr == RtrType::zero_length_read;
}

bool is_seed002_request(const CmSettings& settings, const wire::MpaFrame& request)
{
    return settings.peer_to_peer == PeerToPeerMode::seed002 && request.rev == 1 && request.s;
}

}  // namespace

size_t max_sent_ulp_private_data(const CmSettings& settings, bool enhanced)
{
    const size_t overhead = enhanced ? wire::mpa_enhanced_data_size : 0;
    const size_t total = std::min<size_t>(settings.max_sent_pd_length, wire::mpa_max_pd_length);
    return total > overhead ? total - overhead : 0;
}

wire::MpaFrame make_request(const CmSettings& settings, uint16_t ird, uint16_t ord)
{
    wire::MpaFrame f;
    f.type = wire::MpaFrameType::request;
    f.marker = settings.markers;
    f.crc = settings.crc;
    if (settings.peer_to_peer == PeerToPeerMode::seed002) {
        // The proposal keeps Rev 1; S=1 announces the Rtr frame (P2P-001, P2P-003).
        f.rev = 1;
        f.s = true;
        return f;
    }
    if (settings.mpa_revision == 0) {
        // RFC 5044 Appendix C: an RDMAC RNIC runs with markers and CRC on.
        f.rev = 0;
        f.marker = true;
        f.crc = true;
        return f;
    }
    f.rev = settings.mpa_revision >= 2 ? 2 : 1;
    if (f.rev == 2) {
        wire::MpaEnhancedData ed;
        ed.peer_to_peer = settings.peer_to_peer == PeerToPeerMode::rfc6581 && settings.rtr.any();
        if (ed.peer_to_peer)
            flag_rtr_types(ed, settings.rtr);
        ed.ird = clamp14(ird);
        ed.ord = clamp14(ord);
        f.enhanced = ed;
    }
    return f;
}

RequestAssessment assess_request(const CmSettings& settings, const wire::MpaFrame& request)
{
    RequestAssessment a;
    if (request.rev == 0 || settings.mpa_revision == 0) {
        // RFC 5044 Appendix C.  An upgraded RDMAC Responder (mpa_revision 0)
        // answers every Request with Rev 0, which a permissive Initiator follows.
        a.crc = true;
        if (settings.mpa_revision == 0 || settings.accept_rev0) {
            a.rdmac = true;
            a.reply_revision = 0;
            a.request_markers = true;
            return a;
        }
        // Non-permissive: a Rev 1 Reply refusing the connection (MPA-057).
        a.verdict = RequestAssessment::Verdict::reject;
        a.reason = "MPA Rev 0 (RDMA Consortium) peer refused (mpa_rev0 off)";
        a.reply_revision = 1;
        a.request_markers = request.marker;
        return a;
    }
    if (request.rev > settings.mpa_revision) {
        a.verdict = RequestAssessment::Verdict::close;
        a.reason = "MPA revision above the configured one";
        return a;
    }
    a.crc = request.crc || settings.crc;  // RFC 5044 §7.1.1 C: either side's C=1 wins
    a.request_markers = request.marker;
    if (request.rev >= 2 && request.enhanced) {
        const wire::MpaEnhancedData& ed = *request.enhanced;
        a.enhanced = true;
        a.reply_revision = 2;
        a.peer_ird = ed.ird;
        a.peer_ord = ed.ord;
        if (ed.peer_to_peer) {
            a.peer_to_peer = true;
            a.rtr = choose_rtr(ed.zero_length_send_rtr, ed.zero_length_write_rtr,
                               ed.zero_length_read_rtr, settings.rtr);
            if (a.rtr == RtrType::none) {
                a.verdict = RequestAssessment::Verdict::reject;
                a.reason = "no RTR type in common with the Initiator";
            }
        }
        return a;
    }
    // Plain frame (Rev 1, or Rev 2 with S=0: decision 13).  With Rev 1 the S
    // bit is a Res bit unless seed-002 mode was configured (P2P-025).
    a.reply_revision = 1;
    if (is_seed002_request(settings, request)) {
        a.seed002_rtr = true;
        a.peer_to_peer = true;
    }
    return a;
}

AcceptPlan plan_accept(const CmSettings& settings, const RequestAssessment& request,
                       uint16_t local_ird, uint16_t local_ord)
{
    AcceptPlan p;
    wire::MpaFrame& r = p.reply;
    r.type = wire::MpaFrameType::reply;
    r.marker = settings.markers;
    r.crc = request.crc;
    r.rev = request.reply_revision;
    r.s = request.seed002_rtr;  // enhanced data sets S itself
    if (request.rdmac) r.marker = true;  // Appendix C: markers both ways

    uint16_t ird = std::min(clamp14(local_ird), settings.max_ird);
    uint16_t ord = std::min(clamp14(local_ord), settings.max_ord);
    if (request.enhanced) {
        wire::MpaEnhancedData ed;
        ed.peer_to_peer = request.peer_to_peer;
        flag_rtr(ed, request.rtr);
        // RFC 6581 §9.1: our ORD must not exceed the Initiator's IRD.
        if (request.peer_ird == not_negotiated) {
            ed.ord = not_negotiated;
        } else {
            ord = std::min(ord, request.peer_ird);
            ed.ord = ord;
        }
        // Our IRD is what we grant; the Initiator lowers its ORD to it.  A
        // Read RTR needs room for the one zero-length Read.
        if (request.rtr == RtrType::zero_length_read)
            ird = std::max<uint16_t>(ird, 1);
        ed.ird = request.peer_ord == not_negotiated ? not_negotiated : ird;
        r.enhanced = ed;
    }

    ConnectionParams& c = p.params;
    c.role = ConnectionRole::responder;
    c.mpa_revision = request.reply_revision;
    c.tx = {request.crc, request.request_markers};
    c.rx = {request.crc, settings.markers};
    c.rtr = request.rtr;
    if (request.rdmac) {
        c.ddp_rdmap_version = 0;
        c.tx = {true, true};
        c.rx = {true, true};
    }
    c.ird = ird;
    c.ord = ord;
    return p;
}

wire::MpaFrame make_reject(const CmSettings& settings, const RequestAssessment& request)
{
    wire::MpaFrame r;
    r.type = wire::MpaFrameType::reply;
    r.marker = settings.markers;
    r.crc = request.crc;
    r.reject = true;
    r.rev = request.reply_revision;
    if (request.enhanced) {
        // RFC 6581 §9.2: flag the types we do support so the Initiator can
        // tell why; IRD/ORD are not negotiated on a rejected connection.
        wire::MpaEnhancedData ed;
        ed.peer_to_peer = request.peer_to_peer;
        if (ed.peer_to_peer)
            flag_rtr_types(ed, settings.rtr);
        ed.ird = not_negotiated;
        ed.ord = not_negotiated;
        r.enhanced = ed;
    }
    return r;
}

ReplyOutcome evaluate_reply(const CmSettings& settings, const wire::MpaFrame& request,
                            const wire::MpaFrame& reply, uint16_t local_ird, uint16_t local_ord)
{
    ReplyOutcome o;
    const bool rdmac = reply.rev == 0;
    if (rdmac && request.rev != 0 && !settings.accept_rev0 && !reply.reject) {
        o.verdict = ReplyOutcome::Verdict::close;  // non-permissive (MPA-057)
        o.reason = "MPA Rev 0 (RDMA Consortium) Reply refused (mpa_rev0 off)";
        o.error = wire::TerminateCode{wire::TerminateLayer::llp, wire::etype::llp_mpa,
                                      wire::ecode::mpa_invalid_request_or_reply};
        return o;
    }
    if (reply.reject && request.rev == 0) {  // a non-permissive Responder's Rev 1 refusal
        o.verdict = ReplyOutcome::Verdict::rejected;
        o.reason = "Rev 0 Request refused by the Responder";
        return o;
    }
    if (reply.rev > request.rev) {
        o.verdict = ReplyOutcome::Verdict::close;
        o.reason = "Reply revision above the Request's";
        o.error = wire::TerminateCode{wire::TerminateLayer::llp, wire::etype::llp_mpa,
                                      wire::ecode::mpa_invalid_request_or_reply};
        return o;
    }
    if (reply.reject) {
        o.verdict = ReplyOutcome::Verdict::rejected;
        o.reason = "rejected by the Responder";
        return o;
    }

    const bool crc = request.crc || reply.crc;
    ConnectionParams& c = o.params;
    c.role = ConnectionRole::initiator;
    c.mpa_revision = reply.rev;
    c.tx = {crc, reply.marker};   // Reply M: markers in what we send
    c.rx = {crc, request.marker};
    if (rdmac) {  // RFC 5044 Appendix C: version 0, markers and CRC both ways
        c.ddp_rdmap_version = 0;
        c.tx = {true, true};
        c.rx = {true, true};
    }
    uint16_t ird = std::min(clamp14(local_ird), settings.max_ird);
    uint16_t ord = std::min(clamp14(local_ord), settings.max_ord);

    if (request.enhanced && reply.enhanced) {
        const wire::MpaEnhancedData& ed = *reply.enhanced;
        if (ed.peer_to_peer) {
            // A Read RTR needs an IRD slot at the Responder (siw Terminates
            // it with IRD 0): another common type first.
            c.rtr = choose_rtr(ed.zero_length_send_rtr, ed.zero_length_write_rtr,
                               ed.zero_length_read_rtr && ed.ird != 0, settings.rtr);
            if (c.rtr == RtrType::none)
                c.rtr = choose_rtr(ed.zero_length_send_rtr, ed.zero_length_write_rtr,
                                   ed.zero_length_read_rtr, settings.rtr);
            if (c.rtr == RtrType::none) {
                o.verdict = ReplyOutcome::Verdict::terminate;
                o.reason = "no RTR type in common with the Responder";
                o.error = wire::TerminateCode{wire::TerminateLayer::llp, wire::etype::llp_mpa,
                                              wire::ecode::mpa_no_matching_rtr};
                return o;
            }
        }
        // RFC 6581 §9.1: ORD <= Responder IRD; IRD >= Responder ORD.
        if (ed.ird != not_negotiated)
            ord = std::min(ord, ed.ird);
        if (ed.ord != not_negotiated && ed.ord > ird) {
            if (ed.ord > settings.max_ird) {
                o.verdict = ReplyOutcome::Verdict::terminate;
                o.reason = "Responder ORD exceeds our maximum IRD";
                o.error = wire::TerminateCode{wire::TerminateLayer::llp, wire::etype::llp_mpa,
                                              wire::ecode::mpa_insufficient_ird};
                return o;
            }
            ird = ed.ord;
        }
    } else if (is_seed002_request(settings, request) && reply.rev == 1 && reply.s) {
        o.send_rtr_frame = true;  // P2P-008: only when the Reply says it waits for it
    }
    c.ird = ird;
    c.ord = ord;
    return o;
}

wire::MpaFrame make_rtr_frame(bool reply_crc)
{
    wire::MpaFrame f;
    f.type = wire::MpaFrameType::rtr;
    f.crc = reply_crc;  // "adheres to the C bit of the Reply" (P2P-005)
    f.s = false;
    f.rev = 1;
    return f;
}

}  // namespace iwemu::cm
