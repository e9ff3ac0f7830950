// MPA startup negotiation rules (emulator/cm/mpa_negotiation.h) without
// sockets: Request shape, Responder judgement, Reply evaluation.
#include <gtest/gtest.h>

#include <array>
#include <vector>

#include "emulator/cm/mpa_negotiation.h"

namespace iwemu::cm {
namespace {

constexpr uint16_t nn = wire::mpa_ird_ord_no_negotiation;

wire::MpaFrame enhanced_request(bool a, bool b, bool c, bool d, uint16_t ird, uint16_t ord)
{
    wire::MpaFrame f;
    f.type = wire::MpaFrameType::request;
    f.rev = 2;
    f.crc = true;
    wire::MpaEnhancedData ed;
    ed.peer_to_peer = a;
    ed.zero_length_send_rtr = b;
    ed.zero_length_write_rtr = c;
    ed.zero_length_read_rtr = d;
    ed.ird = ird;
    ed.ord = ord;
    f.enhanced = ed;
    f.s = true;
    return f;
}

wire::MpaFrame enhanced_reply(bool a, bool b, bool c, bool d, uint16_t ird, uint16_t ord)
{
    wire::MpaFrame f = enhanced_request(a, b, c, d, ird, ord);
    f.type = wire::MpaFrameType::reply;
    return f;
}

TEST(CmNegotiation, DefaultRequestIsRev2EnhancedPeerToPeerWriteAndReadCrcNoMarkers)
{
    const wire::MpaFrame f = make_request(CmSettings{}, 16, 8);
    EXPECT_EQ(f.rev, 2);
    EXPECT_TRUE(f.crc);
    EXPECT_FALSE(f.marker);
    ASSERT_TRUE(f.enhanced);
    EXPECT_TRUE(f.enhanced->peer_to_peer);
    EXPECT_FALSE(f.enhanced->zero_length_send_rtr);
    EXPECT_TRUE(f.enhanced->zero_length_write_rtr);
    EXPECT_TRUE(f.enhanced->zero_length_read_rtr);
    EXPECT_EQ(f.enhanced->ird, 16);
    EXPECT_EQ(f.enhanced->ord, 8);

    std::array<uint8_t, 64> buf{};
    const size_t n = wire::encode_mpa_frame(f, buf);
    ASSERT_EQ(n, 24u);
    EXPECT_EQ(buf[16], 0x50);  // C + S
    EXPECT_EQ(buf[17], 2);
    EXPECT_EQ(buf[20], 0x80);  // A, IRD 16
    EXPECT_EQ(buf[21], 0x10);
    EXPECT_EQ(buf[22], 0xC0);  // C D, ORD 8
    EXPECT_EQ(buf[23], 0x08);
}

TEST(CmNegotiation, RequestVariants)
{
    CmSettings s;
    s.mpa_revision = 1;
    s.crc = false;
    s.markers = true;
    wire::MpaFrame f = make_request(s, 4, 4);
    EXPECT_EQ(f.rev, 1);
    EXPECT_FALSE(f.enhanced);
    EXPECT_FALSE(f.s);
    EXPECT_FALSE(f.crc);
    EXPECT_TRUE(f.marker);

    s = {};
    s.peer_to_peer = PeerToPeerMode::off;
    f = make_request(s, 4, 4);
    ASSERT_TRUE(f.enhanced);
    EXPECT_FALSE(f.enhanced->peer_to_peer);
    EXPECT_FALSE(f.enhanced->zero_length_write_rtr || f.enhanced->zero_length_read_rtr ||
                 f.enhanced->zero_length_send_rtr);

    s = {};
    s.peer_to_peer = PeerToPeerMode::seed002;
    f = make_request(s, 4, 4);
    EXPECT_EQ(f.rev, 1);  // the proposal keeps Rev 1
    EXPECT_TRUE(f.s);
    EXPECT_FALSE(f.enhanced);
}

TEST(CmNegotiation, ResponderPicksReadThenWriteThenSend)
{
    CmSettings s;
    s.rtr = {true, true, true};
    struct Case {
        bool b, c, d;
        RtrType want;
    } cases[] = {
        {true, true, true, RtrType::zero_length_read},
        {true, true, false, RtrType::zero_length_write},
        {true, false, false, RtrType::zero_length_send},
        {false, true, false, RtrType::zero_length_write},
    };
    for (const Case& k : cases) {
        const RequestAssessment a = assess_request(s, enhanced_request(true, k.b, k.c, k.d, 8, 8));
        EXPECT_EQ(a.verdict, RequestAssessment::Verdict::offer_to_ulp);
        EXPECT_EQ(a.rtr, k.want);
        const AcceptPlan p = plan_accept(s, a, 8, 8);
        ASSERT_TRUE(p.reply.enhanced);
        // Exactly the chosen type is flagged (decision 8).
        EXPECT_EQ(p.reply.enhanced->zero_length_write_rtr, k.want == RtrType::zero_length_write);
        EXPECT_EQ(p.reply.enhanced->zero_length_read_rtr, k.want == RtrType::zero_length_read);
        EXPECT_EQ(p.reply.enhanced->zero_length_send_rtr, k.want == RtrType::zero_length_send);
        EXPECT_TRUE(p.reply.enhanced->peer_to_peer);
        EXPECT_EQ(p.params.rtr, k.want);
        EXPECT_EQ(p.params.role, ConnectionRole::responder);
    }
}

TEST(CmNegotiation, ConfiguredRtrPreferenceOrder)
{
    CmSettings s;
    s.rtr = {true, true, true};
    s.rtr.preference = {RtrType::zero_length_send, RtrType::zero_length_read, RtrType::zero_length_write};
    EXPECT_EQ(assess_request(s, enhanced_request(true, true, true, true, 8, 8)).rtr, RtrType::zero_length_send);
    EXPECT_EQ(assess_request(s, enhanced_request(true, false, true, true, 8, 8)).rtr, RtrType::zero_length_read);
    const wire::MpaFrame req = make_request(s, 8, 8);
    EXPECT_EQ(evaluate_reply(s, req, enhanced_reply(true, false, true, true, 8, 8), 8, 8).params.rtr,
              RtrType::zero_length_read);
}

TEST(CmNegotiation, RtrListFromConfigurationSetsTypesAndOrder)
{
    RtrTypes t = rtr_types_from_list("write, send");
    EXPECT_TRUE(t.zero_length_write && t.zero_length_send && !t.zero_length_read);
    EXPECT_EQ(t.preference[0], RtrType::zero_length_write);
    EXPECT_EQ(t.preference[1], RtrType::zero_length_send);
    t = rtr_types_from_list("read,write");
    EXPECT_EQ(t.preference[0], RtrType::zero_length_read);
    EXPECT_EQ(t.preference[1], RtrType::zero_length_write);
    t = rtr_types_from_list("write,read,write");
    EXPECT_EQ(t.preference[0], RtrType::zero_length_write);
    EXPECT_EQ(t.preference[1], RtrType::zero_length_read);
    EXPECT_FALSE(rtr_types_from_list("none").any());
    // The configured order decides between the types both ends allow.
    CmSettings s;
    s.rtr = rtr_types_from_list("write,read");
    EXPECT_EQ(assess_request(s, enhanced_request(true, false, true, true, 8, 8)).rtr, RtrType::zero_length_write);
}

TEST(CmNegotiation, ResponderWithoutCommonRtrRejectsFlaggingWhatItSupports)
{
    CmSettings s;  // write + read
    const RequestAssessment a = assess_request(s, enhanced_request(true, true, false, false, 8, 8));
    EXPECT_EQ(a.verdict, RequestAssessment::Verdict::reject);
    const wire::MpaFrame r = make_reject(s, a);
    EXPECT_TRUE(r.reject);
    ASSERT_TRUE(r.enhanced);
    EXPECT_TRUE(r.enhanced->peer_to_peer);
    EXPECT_TRUE(r.enhanced->zero_length_write_rtr);
    EXPECT_TRUE(r.enhanced->zero_length_read_rtr);
    EXPECT_FALSE(r.enhanced->zero_length_send_rtr);
}

TEST(CmNegotiation, ClientServerRequestGetsNoRtr)
{
    const RequestAssessment a = assess_request(CmSettings{}, enhanced_request(false, false, true, true, 8, 8));
    EXPECT_FALSE(a.peer_to_peer);
    EXPECT_EQ(a.rtr, RtrType::none);
    const AcceptPlan p = plan_accept(CmSettings{}, a, 8, 8);
    ASSERT_TRUE(p.reply.enhanced);
    EXPECT_FALSE(p.reply.enhanced->peer_to_peer);
    EXPECT_FALSE(p.reply.enhanced->zero_length_write_rtr);  // A=0: B, C, D sent 0
}

// RFC 6581 §9.1 on the Responder: ORD <= Initiator IRD; 0x3FFF keeps the local value.
TEST(CmNegotiation, ResponderIrdOrd)
{
    const CmSettings s;
    struct Case {
        uint16_t peer_ird, peer_ord, local_ird, local_ord;
        uint16_t want_ird, want_ord, reply_ird, reply_ord;
    } cases[] = {
        {16, 8, 8, 16, 8, 16, 8, 16},        // V-R4 / V-R5
        {4, 8, 8, 16, 8, 4, 8, 4},           // ORD lowered to the Initiator's IRD
        {nn, 8, 8, 16, 8, 16, 8, nn},        // Initiator IRD not negotiated
        {16, nn, 8, 16, 8, 16, nn, 16},      // Initiator ORD not negotiated
        {16, 8, 500, 500, 128, 16, 128, 16}, // device limits (max_ird/max_ord 128)
    };
    for (const Case& k : cases) {
        const RequestAssessment a = assess_request(s, enhanced_request(false, false, false, false, k.peer_ird, k.peer_ord));
        EXPECT_EQ(a.peer_ird, k.peer_ird);
        EXPECT_EQ(a.peer_ord, k.peer_ord);
        const AcceptPlan p = plan_accept(s, a, k.local_ird, k.local_ord);
        EXPECT_EQ(p.params.ird, k.want_ird);
        EXPECT_EQ(p.params.ord, k.want_ord);
        ASSERT_TRUE(p.reply.enhanced);
        EXPECT_EQ(p.reply.enhanced->ird, k.reply_ird);
        EXPECT_EQ(p.reply.enhanced->ord, k.reply_ord);
    }
}

TEST(CmNegotiation, ReadRtrGivesTheResponderAtLeastOneIrd)
{
    const CmSettings s;
    const RequestAssessment a = assess_request(s, enhanced_request(true, false, false, true, 0, 0));
    ASSERT_EQ(a.rtr, RtrType::zero_length_read);
    const AcceptPlan p = plan_accept(s, a, 0, 0);
    EXPECT_EQ(p.params.ird, 1);
    EXPECT_EQ(p.reply.enhanced->ird, 1);
}

// RFC 6581 §9.1 on the Initiator: ORD <= Responder IRD, IRD >= Responder ORD.
TEST(CmNegotiation, InitiatorIrdOrd)
{
    const CmSettings s;
    const wire::MpaFrame req = make_request(s, 16, 8);
    ReplyOutcome o = evaluate_reply(s, req, enhanced_reply(true, false, true, false, 4, 32), 16, 8);
    ASSERT_EQ(o.verdict, ReplyOutcome::Verdict::established);
    EXPECT_EQ(o.params.ord, 4);   // lowered to the Responder's IRD
    EXPECT_EQ(o.params.ird, 32);  // raised to the Responder's ORD
    EXPECT_EQ(o.params.rtr, RtrType::zero_length_write);
    EXPECT_EQ(o.params.role, ConnectionRole::initiator);

    o = evaluate_reply(s, req, enhanced_reply(true, false, true, false, nn, nn), 16, 8);
    EXPECT_EQ(o.params.ord, 8);
    EXPECT_EQ(o.params.ird, 16);

    // Responder ORD beyond what we can grant: Terminate LLP/MPA/0x06.
    o = evaluate_reply(s, req, enhanced_reply(true, false, true, false, 8, 1000), 16, 8);
    ASSERT_EQ(o.verdict, ReplyOutcome::Verdict::terminate);
    EXPECT_EQ(o.error, (wire::TerminateCode{wire::TerminateLayer::llp, 0, 0x06}));
}

TEST(CmNegotiation, InitiatorPicksFromTheReplyOrTerminatesWith07)
{
    CmSettings s;
    s.rtr = {true, true, true};
    const wire::MpaFrame req = make_request(s, 8, 8);
    // siw-style Reply echoing every offered flag: D wins.
    ReplyOutcome o = evaluate_reply(s, req, enhanced_reply(true, true, true, true, 8, 8), 8, 8);
    EXPECT_EQ(o.params.rtr, RtrType::zero_length_read);
    o = evaluate_reply(s, req, enhanced_reply(true, true, true, false, 8, 8), 8, 8);
    EXPECT_EQ(o.params.rtr, RtrType::zero_length_write);
    // A Responder granting IRD 0 could not answer a Read RTR (siw Terminates it).
    o = evaluate_reply(s, req, enhanced_reply(true, true, true, true, 0, 8), 8, 8);
    EXPECT_EQ(o.params.rtr, RtrType::zero_length_write);
    o = evaluate_reply(s, req, enhanced_reply(true, false, false, true, 0, 8), 8, 8);
    EXPECT_EQ(o.params.rtr, RtrType::zero_length_read);  // the only common type still goes
    o = evaluate_reply(s, req, enhanced_reply(true, true, false, false, 8, 8), 8, 8);
    EXPECT_EQ(o.params.rtr, RtrType::zero_length_send);

    CmSettings only_write;
    only_write.rtr = {false, true, false};
    const wire::MpaFrame req2 = make_request(only_write, 8, 8);
    o = evaluate_reply(only_write, req2, enhanced_reply(true, false, false, true, 8, 8), 8, 8);
    ASSERT_EQ(o.verdict, ReplyOutcome::Verdict::terminate);
    EXPECT_EQ(o.error, (wire::TerminateCode{wire::TerminateLayer::llp, 0, 0x07}));

    // Client/server Reply: no RTR.
    o = evaluate_reply(s, req, enhanced_reply(false, false, false, false, 8, 8), 8, 8);
    EXPECT_EQ(o.verdict, ReplyOutcome::Verdict::established);
    EXPECT_EQ(o.params.rtr, RtrType::none);
}

TEST(CmNegotiation, CrcIsOnIfEitherSideAsks)
{
    for (int mask = 0; mask < 4; ++mask) {
        const bool ci = mask & 1, cr = mask & 2;
        CmSettings si, sr;
        si.crc = ci;
        sr.crc = cr;
        const wire::MpaFrame req = make_request(si, 8, 8);
        const RequestAssessment a = assess_request(sr, req);
        const AcceptPlan p = plan_accept(sr, a, 8, 8);
        const ReplyOutcome o = evaluate_reply(si, req, p.reply, 8, 8);
        const bool want = ci || cr;
        EXPECT_EQ(p.params.tx.crc, want) << mask;
        EXPECT_EQ(p.params.rx.crc, want) << mask;
        EXPECT_EQ(o.params.tx.crc, want) << mask;
        EXPECT_EQ(o.params.rx.crc, want) << mask;
        EXPECT_EQ(p.reply.crc, want) << mask;
    }
}

TEST(CmNegotiation, MarkersPerDirection)
{
    for (int mask = 0; mask < 4; ++mask) {
        const bool mi = mask & 1, mr = mask & 2;
        CmSettings si, sr;
        si.markers = mi;  // Initiator wants markers from the Responder
        sr.markers = mr;  // Responder wants markers from the Initiator
        const wire::MpaFrame req = make_request(si, 8, 8);
        EXPECT_EQ(req.marker, mi);
        const AcceptPlan p = plan_accept(sr, assess_request(sr, req), 8, 8);
        EXPECT_EQ(p.reply.marker, mr);
        const ReplyOutcome o = evaluate_reply(si, req, p.reply, 8, 8);
        EXPECT_EQ(p.params.tx.markers, mi) << mask;
        EXPECT_EQ(p.params.rx.markers, mr) << mask;
        EXPECT_EQ(o.params.tx.markers, mr) << mask;
        EXPECT_EQ(o.params.rx.markers, mi) << mask;
    }
}

TEST(CmNegotiation, RevisionRules)
{
    CmSettings s;
    wire::MpaFrame rev1;
    rev1.type = wire::MpaFrameType::request;
    rev1.rev = 1;
    rev1.crc = true;
    RequestAssessment a = assess_request(s, rev1);
    EXPECT_EQ(a.verdict, RequestAssessment::Verdict::offer_to_ulp);
    EXPECT_EQ(a.reply_revision, 1);
    EXPECT_FALSE(a.enhanced);
    AcceptPlan p = plan_accept(s, a, 8, 4);
    EXPECT_EQ(p.reply.rev, 1);
    EXPECT_FALSE(p.reply.enhanced);
    EXPECT_FALSE(p.reply.s);
    EXPECT_EQ(p.params.ird, 8);  // no negotiation: local values
    EXPECT_EQ(p.params.ord, 4);

    // Rev 1 with S=1 outside seed-002 mode: S is a Res bit (P2P-025).
    rev1.s = true;
    a = assess_request(s, rev1);
    EXPECT_FALSE(a.seed002_rtr);
    EXPECT_FALSE(plan_accept(s, a, 8, 8).reply.s);

    // Rev 2 with S=0: plain frame, answered Rev 1 (decision 13).
    wire::MpaFrame rev2plain = rev1;
    rev2plain.rev = 2;
    rev2plain.s = false;
    a = assess_request(s, rev2plain);
    EXPECT_EQ(a.verdict, RequestAssessment::Verdict::offer_to_ulp);
    EXPECT_EQ(a.reply_revision, 1);

    // A Rev-1-only responder closes on Rev 2 (RFC 6581 §10).
    CmSettings v1;
    v1.mpa_revision = 1;
    EXPECT_EQ(assess_request(v1, enhanced_request(false, false, false, false, 8, 8)).verdict,
              RequestAssessment::Verdict::close);

    // Initiator: a Reply above the Request's revision is malformed.
    CmSettings si;
    si.mpa_revision = 1;
    const wire::MpaFrame req = make_request(si, 8, 8);
    const ReplyOutcome o = evaluate_reply(si, req, enhanced_reply(false, false, false, false, 8, 8), 8, 8);
    EXPECT_EQ(o.verdict, ReplyOutcome::Verdict::close);
    // A Rev 1 Reply to a Rev 2 Request: plain connection.
    wire::MpaFrame r1;
    r1.type = wire::MpaFrameType::reply;
    r1.rev = 1;
    const ReplyOutcome o2 = evaluate_reply(s, make_request(s, 8, 8), r1, 8, 8);
    EXPECT_EQ(o2.verdict, ReplyOutcome::Verdict::established);
    EXPECT_EQ(o2.params.mpa_revision, 1);
    EXPECT_EQ(o2.params.rtr, RtrType::none);
}

TEST(CmNegotiation, Seed002Mode)
{
    CmSettings seed;
    seed.peer_to_peer = PeerToPeerMode::seed002;
    const wire::MpaFrame req = make_request(seed, 8, 8);
    const RequestAssessment a = assess_request(seed, req);
    EXPECT_TRUE(a.seed002_rtr);
    const AcceptPlan p = plan_accept(seed, a, 8, 8);
    EXPECT_TRUE(p.reply.s);
    EXPECT_EQ(p.reply.rev, 1);
    EXPECT_EQ(p.params.rtr, RtrType::none);  // the Rtr is a startup frame, not an FPDU
    const ReplyOutcome o = evaluate_reply(seed, req, p.reply, 8, 8);
    EXPECT_TRUE(o.send_rtr_frame);

    // Reply S=0 ("cannot support"): no Rtr frame (P2P-008).
    wire::MpaFrame plain = p.reply;
    plain.s = false;
    EXPECT_FALSE(evaluate_reply(seed, req, plain, 8, 8).send_rtr_frame);

    // The Rtr frame: printed key, C copied, S=0, Rev 1, no PD (V-R7).
    std::array<uint8_t, 32> buf{};
    ASSERT_EQ(wire::encode_mpa_frame(make_rtr_frame(true), buf), 20u);
    const std::array<uint8_t, 20> v_r7{0x4d, 0x50, 0x41, 0x20, 0x49, 0x44, 0x20, 0x52, 0x74, 0x52,
                                       0x20, 0x46, 0x72, 0x61, 0x6d, 0x65, 0x40, 0x01, 0x00, 0x00};
    EXPECT_TRUE(std::equal(v_r7.begin(), v_r7.end(), buf.begin()));
}

}  // namespace
}  // namespace iwemu::cm

namespace iwemu::cm {
namespace {

// RFC 5044 Appendix C, CHECKLIST MPA-057: RDMA Consortium (Rev 0) peers.
wire::MpaFrame rev0_frame(wire::MpaFrameType type)
{
    wire::MpaFrame f;
    f.type = type;
    f.rev = 0;
    f.marker = true;
    f.crc = true;
    return f;
}

TEST(CmNegotiationRev0, PermissiveResponderSwitchesToVersion0WithMarkersAndCrc)
{
    CmSettings s;  // defaults: permissive
    wire::MpaFrame req = rev0_frame(wire::MpaFrameType::request);
    req.marker = false;  // even a peer not asking for markers gets them (RDMAC runs with both)
    req.crc = false;
    const RequestAssessment a = assess_request(s, req);
    EXPECT_EQ(a.verdict, RequestAssessment::Verdict::offer_to_ulp);
    EXPECT_TRUE(a.rdmac);
    const AcceptPlan p = plan_accept(s, a, 4, 4);
    EXPECT_EQ(p.reply.rev, 0);
    EXPECT_TRUE(p.reply.marker);
    EXPECT_TRUE(p.reply.crc);
    EXPECT_FALSE(p.reply.enhanced);
    EXPECT_EQ(p.params.ddp_rdmap_version, 0);
    EXPECT_EQ(p.params.mpa_revision, 0);
    EXPECT_TRUE(p.params.tx.markers && p.params.rx.markers && p.params.tx.crc && p.params.rx.crc);
    EXPECT_EQ(p.params.rtr, RtrType::none);
}

TEST(CmNegotiationRev0, NonPermissiveResponderRepliesRev1WithR)
{
    CmSettings s;
    s.accept_rev0 = false;
    const RequestAssessment a = assess_request(s, rev0_frame(wire::MpaFrameType::request));
    EXPECT_EQ(a.verdict, RequestAssessment::Verdict::reject);
    const wire::MpaFrame r = make_reject(s, a);
    EXPECT_EQ(r.rev, 1);
    EXPECT_TRUE(r.reject);
}

TEST(CmNegotiationRev0, VersionOneConnectionsAreUnchanged)
{
    CmSettings s;
    const RequestAssessment a = assess_request(s, make_request(s, 4, 4));
    EXPECT_FALSE(a.rdmac);
    EXPECT_EQ(plan_accept(s, a, 4, 4).params.ddp_rdmap_version, 1);
}

TEST(CmNegotiationRev0, ForcedRev0InitiatorAndResponder)
{
    CmSettings rdmac;
    rdmac.mpa_revision = 0;
    const wire::MpaFrame req = make_request(rdmac, 4, 4);
    EXPECT_EQ(req.rev, 0);
    EXPECT_TRUE(req.marker && req.crc);
    EXPECT_FALSE(req.enhanced);
    // An RDMAC Responder answers even a Rev 2 Request with Rev 0 ...
    CmSettings ietf;
    const wire::MpaFrame ietf_req = make_request(ietf, 4, 4);
    const RequestAssessment a = assess_request(rdmac, ietf_req);
    EXPECT_TRUE(a.rdmac);
    const AcceptPlan p = plan_accept(rdmac, a, 4, 4);
    EXPECT_EQ(p.reply.rev, 0);
    // ... which a permissive Initiator follows,
    const ReplyOutcome o = evaluate_reply(ietf, ietf_req, p.reply, 4, 4);
    EXPECT_EQ(o.verdict, ReplyOutcome::Verdict::established);
    EXPECT_EQ(o.params.ddp_rdmap_version, 0);
    EXPECT_TRUE(o.params.tx.markers && o.params.rx.markers && o.params.tx.crc && o.params.rx.crc);
    EXPECT_EQ(o.params.rtr, RtrType::none);
    // and a non-permissive one refuses.
    CmSettings strict;
    strict.accept_rev0 = false;
    EXPECT_EQ(evaluate_reply(strict, ietf_req, p.reply, 4, 4).verdict, ReplyOutcome::Verdict::close);
    // The RDMAC Initiator: Rev 0 Reply -> version 0; a Rev 1 refusal -> rejected.
    const ReplyOutcome o0 = evaluate_reply(rdmac, req, rev0_frame(wire::MpaFrameType::reply), 4, 4);
    EXPECT_EQ(o0.verdict, ReplyOutcome::Verdict::established);
    EXPECT_EQ(o0.params.ddp_rdmap_version, 0);
    wire::MpaFrame refusal;
    refusal.type = wire::MpaFrameType::reply;
    refusal.rev = 1;
    refusal.reject = true;
    EXPECT_EQ(evaluate_reply(rdmac, req, refusal, 4, 4).verdict, ReplyOutcome::Verdict::rejected);
}

}  // namespace
}  // namespace iwemu::cm
