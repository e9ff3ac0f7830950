// Every DDP/RDMAP error path between two emulators: the Terminate code on
// the wire (as the peer decoded it), both QPs in ERR, completion statuses and
// the async events on both sides.  A raw TCP peer injects what an emulator
// never sends (RFC 7306 opcodes, bad CRC, bad versions).
#include "emulator/wire/fpdu.h"
#include "emulator/wire/fpdu_receiver.h"
#include "emulator/wire/ddp_header.h"
#include "emulator/wire/rdmap_ext.h"
#include "emulator/wire/rdmap_opcode.h"
#include "emulator/wire/terminate_message.h"
#include "tests/emulator/qp_loopback_fixture.h"

namespace iwemu::test {
namespace {

using wire::TerminateCode;
using wire::TerminateLayer;

constexpr TerminateCode code(uint8_t layer, uint8_t etype, uint8_t ecode)
{
    return {static_cast<TerminateLayer>(layer), etype, ecode};
}

// `from` detected the error and sent the Terminate; `to` received it.
void expect_terminate(Side& from, Side& to, TerminateCode c, AsyncEventType from_event, bool rdma_header = false)
{
    ASSERT_TRUE(from.wait_state(QpState::err));
    ASSERT_TRUE(to.wait_state(QpState::err));
    const auto sent = from.qp->last_terminate_sent();
    const auto got = to.qp->last_terminate_received();
    ASSERT_TRUE(sent.valid);
    ASSERT_TRUE(got.valid);
    EXPECT_EQ(sent.code, c);
    EXPECT_EQ(got.code, c);  // decoded from the wire by the peer
    EXPECT_EQ(got.had_rdma_header, rdma_header);
    // The status counters: one Terminate each way, at its layer.
    const size_t layer = static_cast<size_t>(c.layer);
    EXPECT_EQ(from.qp->counters().terminates_sent[layer].load(), 1u);
    EXPECT_EQ(to.qp->counters().terminates_received[layer].load(), 1u);
    EXPECT_EQ(from.qp->counters().terminates_received[layer].load(), 0u);
    const auto end = std::chrono::steady_clock::now() + 2s;
    while (std::chrono::steady_clock::now() < end &&
           !(from.events.has_async(from_event) && to.events.has_async(AsyncEventType::qp_fatal)))
        std::this_thread::sleep_for(1ms);
    EXPECT_TRUE(from.events.has_async(from_event));
    EXPECT_TRUE(to.events.has_async(AsyncEventType::qp_fatal));
    EXPECT_TRUE(from.events.wait_conn(QpConnectionEvent::terminated));
    EXPECT_TRUE(to.events.wait_conn(QpConnectionEvent::terminated));
}

struct Bufs {
    std::vector<uint8_t> src = std::vector<uint8_t>(4096), dst = std::vector<uint8_t>(4096);
    MemoryRegion* smr;
    MemoryRegion* dmr;
    Bufs(LoopbackPair& p, uint32_t dst_access = access_local_write | access_remote_write | access_remote_read)
    {
        smr = p.a->reg(src.data(), src.size());
        dmr = p.b->reg(dst.data(), dst.size(), dst_access);
    }
    uint64_t daddr(size_t off = 0) { return reinterpret_cast<uint64_t>(dst.data() + off); }
};

TEST(ErrorPath, WriteInvalidStag)
{
    LoopbackPair p;
    Bufs b(p);
    ASSERT_EQ(p.a->post_send(WrOpcode::rdma_write, b.src.data(), 64, b.smr, 1, b.daddr(), b.dmr->rkey() ^ 0x5A), 0);
    expect_terminate(*p.b, *p.a, code(1, 1, 0x00), AsyncEventType::qp_access_err);
    // Later work on the requester is flushed.
    ASSERT_EQ(p.a->post_send(WrOpcode::send, b.src.data(), 8, b.smr, 2), 0);
    auto s = p.a->wait(p.a->scq, 2);
    ASSERT_EQ(s.size(), 2u);
    EXPECT_EQ(s[1].status, WcStatus::wr_flush_err);
}

TEST(ErrorPath, WriteOutOfBounds)
{
    LoopbackPair p;
    Bufs b(p);
    ASSERT_EQ(p.a->post_send(WrOpcode::rdma_write, b.src.data(), 100, b.smr, 1, b.daddr(4000), b.dmr->rkey()), 0);
    expect_terminate(*p.b, *p.a, code(1, 1, 0x01), AsyncEventType::qp_access_err);
    EXPECT_EQ(b.dst[3999], 0);  // nothing placed
}

TEST(ErrorPath, WriteWithoutRemoteWriteRight)
{
    LoopbackPair p;
    Bufs b(p, access_local_write | access_remote_read);
    std::fill(b.src.begin(), b.src.end(), 0xAB);
    ASSERT_EQ(p.a->post_send(WrOpcode::rdma_write, b.src.data(), 64, b.smr, 1, b.daddr(), b.dmr->rkey()), 0);
    // DDP has no access-rights code: Linux siw reports an invalid STag.
    expect_terminate(*p.b, *p.a, code(1, 1, 0x00), AsyncEventType::qp_access_err);
    EXPECT_EQ(b.dst[0], 0);
}

// A region registered on s's emulator under a second PD: a valid STag that
// s's QP, on the first PD, must still refuse.
struct ForeignRegion {
    std::vector<uint8_t> buf = std::vector<uint8_t>(4096);
    MemoryRegion* mr = nullptr;
    uint64_t addr() const { return reinterpret_cast<uint64_t>(buf.data()); }
};

void reg_in_another_pd(Side& s, uint32_t access, ForeignRegion* out)
{
    ProtectionDomain* pd2;
    ASSERT_EQ(s.emu->alloc_pd(&pd2), 0);
    ASSERT_EQ(s.emu->reg_mr(pd2, out->buf.data(), out->buf.size(), out->addr(), access, &out->mr), 0);
}

TEST(ErrorPath, WriteToInvalidatedStag)
{
    LoopbackPair p;
    Bufs b(p);
    SendWr li;
    li.opcode = WrOpcode::local_inv;
    li.send_flags = send_signaled;
    li.invalidate_rkey = b.dmr->rkey();
    size_t bad;
    ASSERT_EQ(p.b->qp->post_send(&li, 1, &bad), 0);
    ASSERT_EQ(p.b->wait(p.b->scq, 1).size(), 1u);
    ASSERT_EQ(p.a->post_send(WrOpcode::rdma_write, b.src.data(), 64, b.smr, 1, b.daddr(), b.dmr->rkey()), 0);
    expect_terminate(*p.b, *p.a, code(1, 1, 0x00), AsyncEventType::qp_access_err);
}

TEST(ErrorPath, WriteToStagOfAnotherPd)
{
    LoopbackPair p;
    Bufs b(p);
    ForeignRegion other;
    ASSERT_NO_FATAL_FAILURE(reg_in_another_pd(*p.b, access_local_write | access_remote_write, &other));
    ASSERT_EQ(p.a->post_send(WrOpcode::rdma_write, b.src.data(), 64, b.smr, 1, other.addr(), other.mr->rkey()), 0);
    expect_terminate(*p.b, *p.a, code(1, 1, 0x02), AsyncEventType::qp_access_err);
}

TEST(ErrorPath, SendLongerThanReceiveBuffer)
{
    LoopbackPair p;
    Bufs b(p);
    ASSERT_EQ(p.b->post_recv(b.dst.data(), 10, b.dmr, 7), 0);
    ASSERT_EQ(p.b->post_recv(b.dst.data(), 10, b.dmr, 8), 0);
    ASSERT_EQ(p.a->post_send(WrOpcode::send, b.src.data(), 100, b.smr, 1), 0);
    expect_terminate(*p.b, *p.a, code(1, 2, 0x05), AsyncEventType::qp_fatal);
    auto r = p.b->wait(p.b->rcq, 2);
    ASSERT_EQ(r.size(), 2u);
    EXPECT_EQ(r[0].wr_id, 7u);
    EXPECT_EQ(r[0].status, WcStatus::loc_len_err);
    EXPECT_EQ(r[1].status, WcStatus::wr_flush_err);
}

TEST(ErrorPath, SendToEmptyReceiveQueue)
{
    PairOptions o;
    o.config.rnr_wait_ms = 0;  // siw's behaviour; the wait itself: rnr_wait_test.cpp
    LoopbackPair p(o);
    Bufs b(p);
    ASSERT_EQ(p.a->post_send(WrOpcode::send, b.src.data(), 10, b.smr, 1), 0);
    expect_terminate(*p.b, *p.a, code(1, 2, 0x02), AsyncEventType::qp_fatal);
}

TEST(ErrorPath, ReadInvalidStag)
{
    LoopbackPair p;
    Bufs b(p);
    ASSERT_EQ(p.a->post_send(WrOpcode::rdma_read, b.src.data(), 64, b.smr, 1, b.daddr(), b.dmr->rkey() + 1), 0);
    expect_terminate(*p.b, *p.a, code(0, 1, 0x00), AsyncEventType::qp_access_err, true);
    auto s = p.a->wait(p.a->scq, 1);
    ASSERT_EQ(s.size(), 1u);
    EXPECT_EQ(s[0].status, WcStatus::rem_access_err);
}

TEST(ErrorPath, ReadOutOfBounds)
{
    LoopbackPair p;
    Bufs b(p);
    ASSERT_EQ(p.a->post_send(WrOpcode::rdma_read, b.src.data(), 200, b.smr, 1, b.daddr(4000), b.dmr->rkey()), 0);
    expect_terminate(*p.b, *p.a, code(0, 1, 0x01), AsyncEventType::qp_access_err, true);
}

TEST(ErrorPath, ReadWithoutRemoteReadRight)
{
    LoopbackPair p;
    Bufs b(p, access_local_write | access_remote_write);
    ASSERT_EQ(p.a->post_send(WrOpcode::rdma_read, b.src.data(), 64, b.smr, 1, b.daddr(), b.dmr->rkey()), 0);
    expect_terminate(*p.b, *p.a, code(0, 1, 0x02), AsyncEventType::qp_access_err, true);
}

TEST(ErrorPath, ReadFromStagOfAnotherPd)
{
    LoopbackPair p;
    Bufs b(p);
    ForeignRegion other;
    ASSERT_NO_FATAL_FAILURE(reg_in_another_pd(*p.b, access_local_write | access_remote_read, &other));
    ASSERT_EQ(p.a->post_send(WrOpcode::rdma_read, b.src.data(), 64, b.smr, 1, other.addr(), other.mr->rkey()), 0);
    expect_terminate(*p.b, *p.a, code(0, 1, 0x03), AsyncEventType::qp_access_err, true);
}

// Read Requests beyond IRD are covered end to end by the hostile peer
// (tests/robustness: reads_beyond_ird_patient_victim), which holds the first
// Response back; between two emulators the outcome depended on scheduling.

TEST(ErrorPath, SendWithInvalidateOfUnknownStag)
{
    LoopbackPair p;
    Bufs b(p);
    ASSERT_EQ(p.b->post_recv(b.dst.data(), 64, b.dmr, 3), 0);
    ASSERT_EQ(p.a->post_send(WrOpcode::send_with_inv, b.src.data(), 8, b.smr, 1, 0, 0, send_signaled, 0x00ABCD01), 0);
    expect_terminate(*p.b, *p.a, code(0, 1, 0x09), AsyncEventType::qp_access_err);
    auto r = p.b->wait(p.b->rcq, 1);
    ASSERT_EQ(r.size(), 1u);
    EXPECT_EQ(r[0].status, WcStatus::rem_inv_req_err);
}

// ---- RFC 7306 atomics: the responder's checks (atomics.cpp) -----------------

// The target word of an atomic, on b, and a's result buffer.
struct AtomicBufs {
    std::vector<uint64_t> target = std::vector<uint64_t>(4, 0x5A5A), result = std::vector<uint64_t>(1, 0);
    MemoryRegion* tmr;
    MemoryRegion* rmr;
    AtomicBufs(LoopbackPair& p, uint32_t target_access = access_local_write | access_remote_atomic)
    {
        tmr = p.b->reg(target.data(), target.size() * 8, target_access);
        rmr = p.a->reg(result.data(), 8);
    }
    uint64_t taddr(size_t i = 0) { return reinterpret_cast<uint64_t>(&target[i]); }
    // The requester's WR fails with the Terminate's status; the word is untouched.
    void expect_refused(Side& a, WcStatus status)
    {
        const auto s = a.wait(a.scq, 1);
        ASSERT_EQ(s.size(), 1u);
        EXPECT_EQ(s[0].status, status);
        EXPECT_EQ(s[0].opcode, WcOpcode::fetch_add);
        for (uint64_t t : target) EXPECT_EQ(t, 0x5A5Au);
    }
};

TEST(ErrorPath, AtomicWithoutRemoteAtomicRightOnRegion)
{
    LoopbackPair p;
    AtomicBufs b(p, access_local_write | access_remote_write | access_remote_read);
    ASSERT_EQ(p.a->post_atomic(WrOpcode::atomic_fetch_and_add, &b.result[0], b.rmr, 1, b.taddr(), b.tmr->rkey(), 1), 0);
    expect_terminate(*p.b, *p.a, code(0, 1, 0x02), AsyncEventType::qp_access_err);
    b.expect_refused(*p.a, WcStatus::rem_access_err);
}

// The QP's own right (ibv_modify_qp's qp_access_flags), as IB responders check it.
TEST(ErrorPath, AtomicWithoutRemoteAtomicRightOnQp)
{
    LoopbackPair p;
    AtomicBufs b(p);
    QpAttr at;
    at.qp_access_flags = access_local_write | access_remote_write | access_remote_read;
    ASSERT_EQ(p.b->qp->modify(at, qp_attr_access_flags), 0);
    ASSERT_EQ(p.a->post_atomic(WrOpcode::atomic_fetch_and_add, &b.result[0], b.rmr, 1, b.taddr(), b.tmr->rkey(), 1), 0);
    expect_terminate(*p.b, *p.a, code(0, 1, 0x02), AsyncEventType::qp_access_err);
    b.expect_refused(*p.a, WcStatus::rem_access_err);
}

TEST(ErrorPath, AtomicInvalidStag)
{
    LoopbackPair p;
    AtomicBufs b(p);
    ASSERT_EQ(p.a->post_atomic(WrOpcode::atomic_fetch_and_add, &b.result[0], b.rmr, 1, b.taddr(), b.tmr->rkey() + 1, 1),
              0);
    expect_terminate(*p.b, *p.a, code(0, 1, 0x00), AsyncEventType::qp_access_err);
    b.expect_refused(*p.a, WcStatus::rem_access_err);
}

TEST(ErrorPath, AtomicOutOfBounds)
{
    LoopbackPair p;
    AtomicBufs b(p);
    // The last word plus 8: one word past the 32-octet region.
    ASSERT_EQ(p.a->post_atomic(WrOpcode::atomic_fetch_and_add, &b.result[0], b.rmr, 1, b.taddr(3) + 8, b.tmr->rkey(), 1),
              0);
    expect_terminate(*p.b, *p.a, code(0, 1, 0x01), AsyncEventType::qp_access_err);
    b.expect_refused(*p.a, WcStatus::rem_access_err);
}

TEST(ErrorPath, AtomicToStagOfAnotherPd)
{
    LoopbackPair p;
    AtomicBufs b(p);
    ForeignRegion other;
    ASSERT_NO_FATAL_FAILURE(reg_in_another_pd(*p.b, access_local_write | access_remote_atomic, &other));
    ASSERT_EQ(p.a->post_atomic(WrOpcode::atomic_fetch_and_add, &b.result[0], b.rmr, 1, other.addr(), other.mr->rkey(), 1),
              0);
    expect_terminate(*p.b, *p.a, code(0, 1, 0x03), AsyncEventType::qp_access_err);
    b.expect_refused(*p.a, WcStatus::rem_access_err);
    EXPECT_EQ(other.buf, std::vector<uint8_t>(4096, 0));
}

TEST(ErrorPath, Rfc7306RefusedLocally)
{
    LoopbackPair p;
    Bufs b(p);
    // rdma_write_with_imm is RFC 7306 Immediate Data (immediate_data_test.cpp),
    // atomics are RFC 7306 Atomic Operations (atomics_test.cpp).
    for (WrOpcode op : {WrOpcode::send_with_imm}) {
        EXPECT_EQ(p.a->post_send(op, b.src.data(), 8, b.smr, 1, b.daddr(), b.dmr->rkey()), EOPNOTSUPP);
    }
    EXPECT_EQ(p.a->qp->state(), QpState::rts);
}

// ---- a raw TCP peer ------------------------------------------------------

struct RawPeer {
    Config cfg;
    Side side{cfg};
    int raw = -1;

    explicit RawPeer(bool crc = true, const Config& c = {}) : cfg(c)
    {
        auto [fa, fb] = tcp_pair();
        raw = fa;
        ConnectionParams pb;
        pb.fd = fb;
        pb.role = ConnectionRole::responder;
        pb.tx = pb.rx = {crc, false};
        EXPECT_EQ(side.qp->attach_connection(pb), 0);
        timeval tv{5, 0};
        setsockopt(raw, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    }
    ~RawPeer() { ::close(raw); }

    uint32_t offset = 0;
    void send_fpdu(std::span<const uint8_t> header, std::span<const uint8_t> payload = {}, bool corrupt_crc = false)
    {
        uint8_t out[70000];
        const size_t n = wire::encode_fpdu(out, header, payload, offset, {true, false});
        ASSERT_GT(n, 0u);
        offset += static_cast<uint32_t>(n);
        if (corrupt_crc) out[n - 1] ^= 0x01;
        ASSERT_EQ(::write(raw, out, n), static_cast<ssize_t>(n));
    }
    // Read the Terminate the QP sends back (its first FPDU).
    wire::TerminateMessage read_terminate(std::vector<uint8_t>& keep)
    {
        keep.resize(256);
        size_t got = 0;
        while (got < 2 || got < 2 + static_cast<size_t>(keep[0] << 8 | keep[1])) {
            ssize_t k = ::read(raw, keep.data() + got, keep.size() - got);
            if (k <= 0) break;
            got += static_cast<size_t>(k);
        }
        if (got < 2 + 18) return {};
        const size_t len = static_cast<size_t>(keep[0] << 8 | keep[1]);
        EXPECT_EQ(keep[2], 0x41);  // untagged, L, DV 1
        EXPECT_EQ(keep[3], 0x47);  // RV 1, Terminate
        return wire::decode_terminate(std::span<const uint8_t>(keep.data() + 2 + 18, len - 18));
    }
};

std::vector<uint8_t> untagged_header(uint8_t opcode, uint32_t qn, uint32_t msn, uint8_t dv = 1, uint8_t rv = 1)
{
    std::vector<uint8_t> h(18);
    wire::DdpHeader d;
    d.control = {false, true, 0, dv};
    d.rsvdulp0 = wire::encode_rdmap_control(wire::RdmapControl{rv, 0, opcode});
    d.qn = qn;
    d.msn = msn;
    wire::encode_ddp_header(d, h);
    if (dv != 1) h[0] = static_cast<uint8_t>((h[0] & ~0x03) | dv);
    return h;
}

TEST(ErrorPathRaw, ImmediateDataAnsweredWithUnexpectedOpcodeWhenRfc7306Off)
{
    Config off;
    off.rfc7306 = false;
    RawPeer p(true, off);
    auto h = untagged_header(0x8, 0, 1);
    uint8_t imm[8] = {1, 2, 3, 4, 5, 6, 7, 8};
    h.insert(h.end(), imm, imm + 8);
    p.send_fpdu(h);
    std::vector<uint8_t> keep;
    const auto t = p.read_terminate(keep);
    EXPECT_EQ(t.control.code, code(0, 2, 0x06));
    EXPECT_TRUE(t.control.d);
    ASSERT_TRUE(p.side.wait_state(QpState::err));
    EXPECT_TRUE(p.side.events.wait_async(AsyncEventType::qp_fatal));
}

// RFC 7306 on (default): octets 0..3 are the verbs immediate value, 4..7 ignored.
TEST(ErrorPathRaw, ImmediateDataFromAPeerCompletesAReceive)
{
    RawPeer p;
    ASSERT_EQ(p.side.post_recv(nullptr, 0, nullptr, 31), 0);
    auto h = untagged_header(0x9, 0, 1);
    const uint8_t imm[8] = {0xCA, 0xFE, 0xF0, 0x0D, 1, 2, 3, 4};
    h.insert(h.end(), imm, imm + 8);
    p.send_fpdu(h);
    const auto r = p.side.wait(p.side.rcq, 1);
    ASSERT_EQ(r.size(), 1u);
    EXPECT_EQ(r[0].wr_id, 31u);
    EXPECT_EQ(r[0].status, WcStatus::success);
    EXPECT_EQ(r[0].opcode, WcOpcode::recv_rdma_with_imm);
    EXPECT_EQ(r[0].wc_flags, wc_with_imm);
    EXPECT_EQ(r[0].imm_data_or_inv_rkey, 0xCAFEF00Du);
    EXPECT_EQ(r[0].byte_len, 0u);  // no RDMA Write preceded it
    EXPECT_EQ(p.side.qp->state(), QpState::rts);
}

// EXT-002: the DDP message is exactly 8 octets, else 0/2/FF (decision 7).
TEST(ErrorPathRaw, ImmediateDataOfWrongLengthAnsweredWithUnspecified)
{
    for (size_t len : {7u, 9u}) {
        RawPeer p;
        ASSERT_EQ(p.side.post_recv(nullptr, 0, nullptr, 1), 0);
        auto h = untagged_header(0x8, 0, 1);
        h.resize(18 + len);
        p.send_fpdu(h);
        std::vector<uint8_t> keep;
        EXPECT_EQ(p.read_terminate(keep).control.code, code(0, 2, 0xFF)) << len;
        ASSERT_TRUE(p.side.wait_state(QpState::err));
        const auto r = p.side.wait(p.side.rcq, 1);
        ASSERT_EQ(r.size(), 1u);
        EXPECT_EQ(r[0].status, WcStatus::wr_flush_err);
    }
}

// Immediate Data on the wrong queue is a DDP error like any QN-0 message's.
TEST(ErrorPathRaw, ImmediateDataWithWrongMsnOrQueue)
{
    {
        RawPeer p;
        ASSERT_EQ(p.side.post_recv(nullptr, 0, nullptr, 1), 0);
        auto h = untagged_header(0x8, 0, 2);  // MSN 2 where 1 is expected
        h.resize(26);
        p.send_fpdu(h);
        std::vector<uint8_t> keep;
        EXPECT_EQ(p.read_terminate(keep).control.code, code(1, 2, 0x03));
    }
    {
        RawPeer p;
        auto h = untagged_header(0x8, 1, 1);  // QN 1
        h.resize(26);
        p.send_fpdu(h);
        std::vector<uint8_t> keep;
        EXPECT_EQ(p.read_terminate(keep).control.code, code(1, 2, 0x01));
    }
}

TEST(ErrorPathRaw, AtomicRequestAnsweredWithUnexpectedOpcodeWhenRfc7306Off)
{
    Config off;
    off.rfc7306 = false;
    RawPeer p(true, off);
    auto h = untagged_header(0xA, 1, 1);
    h.resize(18 + 52);
    p.send_fpdu(h);
    std::vector<uint8_t> keep;
    EXPECT_EQ(p.read_terminate(keep).control.code, code(0, 2, 0x06));
}

// An Atomic Request from a raw peer: the 52-octet header of RFC 7306 §5.2.1.
std::vector<uint8_t> atomic_request(uint32_t msn, const wire::AtomicRequestHeader& a)
{
    auto h = untagged_header(0xA, 1, msn);
    h.resize(18 + wire::atomic_request_header_size);
    wire::encode_atomic_request(a, std::span<uint8_t>(h.data() + 18, wire::atomic_request_header_size));
    return h;
}

struct RawTarget {
    std::vector<uint64_t> words = std::vector<uint64_t>(4, 0);
    MemoryRegion* mr;
    explicit RawTarget(Side& s) : mr(s.reg(words.data(), 32, access_local_write | access_remote_atomic)) {}
    uint64_t addr(size_t i = 0) { return reinterpret_cast<uint64_t>(&words[i]); }
};

// A masked FetchAdd (two 32-bit counters) and a masked CmpSwap from a peer
// that is not iwemu: the Atomic Responses on QN 3 with MSNs 1, 2, the
// request identifiers echoed and the original values, big-endian.
TEST(ErrorPathRaw, AtomicRequestsWithMasksFromAPeer)
{
    RawPeer p;
    RawTarget t(p.side);
    t.words[1] = 0x00000001FFFFFFFFull;
    wire::AtomicRequestHeader a;
    a.aopcode = 0;
    a.request_identifier = 0xABCD0001;
    a.remote_stag = t.mr->rkey();
    a.remote_to = t.addr(1);
    a.add_or_swap_data = 0x0000000100000001ull;
    a.add_or_swap_mask = 1ull << 31 | 1ull << 63;
    a.compare_mask = ~uint64_t{0};
    p.send_fpdu(atomic_request(1, a));
    a.aopcode = 2;
    a.request_identifier = 0x77;
    a.compare_data = 0x0000000200000000ull;
    a.compare_mask = 0xFFFFFFFF00000000ull;  // only the high half must match
    a.add_or_swap_data = 0x1234;
    a.add_or_swap_mask = 0xFFFF;             // only the low 16 bits change
    p.send_fpdu(atomic_request(2, a));
    // Two FPDUs of 2 + 30 + CRC 4 octets (no pad).
    uint8_t in[72];
    size_t got = 0;
    while (got < sizeof in) {
        const ssize_t k = ::read(p.raw, in + got, sizeof in - got);
        ASSERT_GT(k, 0);
        got += static_cast<size_t>(k);
    }
    for (int i = 0; i < 2; ++i) {
        const uint8_t* f = in + 36 * i;
        ASSERT_EQ(f[0] << 8 | f[1], 30);
        const auto d = wire::decode_ddp_header(std::span<const uint8_t>(f + 2, 18));
        ASSERT_TRUE(d);
        EXPECT_EQ(f[2], 0x41);
        EXPECT_EQ(f[3], 0x4B);  // RV 1, Atomic Response
        EXPECT_EQ(d->qn, 3u);
        EXPECT_EQ(d->msn, static_cast<uint32_t>(i + 1));
        EXPECT_EQ(d->mo, 0u);
        const auto r = wire::decode_atomic_response(std::span<const uint8_t>(f + 20, 12));
        ASSERT_TRUE(r);
        EXPECT_EQ(r->original_request_identifier, i == 0 ? 0xABCD0001u : 0x77u);
        EXPECT_EQ(r->original_remote_data_value, i == 0 ? 0x00000001FFFFFFFFull : 0x0000000200000000ull);
    }
    // (an atomic load: the engine thread changed it with atomic instructions)
    EXPECT_EQ(__atomic_load_n(&t.words[1], __ATOMIC_ACQUIRE), 0x0000000200001234ull);  // carry stayed in the low field, then the swap
    EXPECT_EQ(p.side.qp->state(), QpState::rts);
}

// AOpCode 1 is reserved (decision 12): an unsupported operation, memory untouched.
TEST(ErrorPathRaw, AtomicRequestWithReservedAOpCode)
{
    RawPeer p;
    RawTarget t(p.side);
    wire::AtomicRequestHeader a;
    a.aopcode = 1;
    a.remote_stag = t.mr->rkey();
    a.remote_to = t.addr();
    a.add_or_swap_data = 5;
    p.send_fpdu(atomic_request(1, a));
    std::vector<uint8_t> keep;
    const auto term = p.read_terminate(keep);
    EXPECT_EQ(term.control.code, code(0, 2, 0x06));
    EXPECT_TRUE(term.control.d);   // RFC 7306 §8: the DDP header ...
    EXPECT_FALSE(term.control.r);  // ... and no RDMA header
    ASSERT_TRUE(p.side.wait_state(QpState::err));
    EXPECT_EQ(t.words[0], 0u);
}

// EXT-008: a TO that is not 64-bit aligned, inside the region and with every
// right: Terminate 0/2/07, memory untouched.
TEST(ErrorPathRaw, AtomicRequestMisaligned)
{
    RawPeer p;
    RawTarget t(p.side);
    wire::AtomicRequestHeader a;
    a.aopcode = 0;
    a.remote_stag = t.mr->rkey();
    a.remote_to = t.addr() + 4;
    a.add_or_swap_data = 1;
    p.send_fpdu(atomic_request(1, a));
    std::vector<uint8_t> keep;
    const auto term = p.read_terminate(keep);
    EXPECT_EQ(term.control.code, code(0, 2, 0x07));
    EXPECT_TRUE(term.control.d);
    ASSERT_TRUE(p.side.wait_state(QpState::err));
    EXPECT_TRUE(p.side.events.wait_async(AsyncEventType::qp_fatal));
    EXPECT_EQ(t.words, std::vector<uint64_t>(4, 0));
}

// Atomic Requests share the Read Request MSN sequence (QN 1).
TEST(ErrorPathRaw, AtomicRequestWithWrongMsn)
{
    RawPeer p;
    RawTarget t(p.side);
    wire::AtomicRequestHeader a;
    a.remote_stag = t.mr->rkey();
    a.remote_to = t.addr();
    p.send_fpdu(atomic_request(2, a));
    std::vector<uint8_t> keep;
    EXPECT_EQ(p.read_terminate(keep).control.code, code(1, 2, 0x03));
}

TEST(ErrorPathRaw, AtomicResponseNobodyAskedFor)
{
    RawPeer p;
    auto h = untagged_header(0xB, 3, 1);
    h.resize(18 + wire::atomic_response_header_size);
    p.send_fpdu(h);
    std::vector<uint8_t> keep;
    EXPECT_EQ(p.read_terminate(keep).control.code, code(0, 2, 0x06));
}

TEST(ErrorPathRaw, BadCrc)
{
    RawPeer p;
    std::vector<uint8_t> dst(64);
    auto* mr = p.side.reg(dst.data(), 64);
    ASSERT_EQ(p.side.post_recv(dst.data(), 64, mr, 1), 0);
    auto h = untagged_header(0x3, 0, 1);
    const uint8_t payload[5] = {1, 2, 3, 4, 5};
    p.send_fpdu(h, payload, true);
    std::vector<uint8_t> keep;
    const auto t = p.read_terminate(keep);
    EXPECT_EQ(t.control.code, code(2, 0, 0x02));
    EXPECT_FALSE(t.control.d);  // LLP errors carry no headers
    auto r = p.side.wait(p.side.rcq, 1);
    ASSERT_EQ(r.size(), 1u);
    EXPECT_NE(r[0].status, WcStatus::success);
}

TEST(ErrorPathRaw, InvalidRdmapVersion)
{
    RawPeer p;
    p.send_fpdu(untagged_header(0x3, 0, 1, 1, 2));
    std::vector<uint8_t> keep;
    EXPECT_EQ(p.read_terminate(keep).control.code, code(0, 2, 0x05));
}

TEST(ErrorPathRaw, InvalidDdpVersion)
{
    RawPeer p;
    p.send_fpdu(untagged_header(0x3, 0, 1, 2));
    std::vector<uint8_t> keep;
    EXPECT_EQ(p.read_terminate(keep).control.code, code(1, 2, 0x06));
}

TEST(ErrorPathRaw, InvalidQueueNumber)
{
    RawPeer p;
    p.send_fpdu(untagged_header(0x3, 7, 1));
    std::vector<uint8_t> keep;
    EXPECT_EQ(p.read_terminate(keep).control.code, code(1, 2, 0x01));
}

TEST(ErrorPathRaw, WrongMsn)
{
    RawPeer p;
    std::vector<uint8_t> dst(64);
    auto* mr = p.side.reg(dst.data(), 64);
    ASSERT_EQ(p.side.post_recv(dst.data(), 64, mr, 1), 0);
    p.send_fpdu(untagged_header(0x3, 0, 5));
    std::vector<uint8_t> keep;
    EXPECT_EQ(p.read_terminate(keep).control.code, code(1, 2, 0x03));
}

TEST(ErrorPathRaw, ReadResponseNobodyAskedFor)
{
    RawPeer p;
    std::vector<uint8_t> h(14);
    wire::DdpHeader d;
    d.control = {true, true, 0, 1};
    d.rsvdulp0 = wire::encode_rdmap_control(wire::RdmapOpcode::rdma_read_response);
    d.stag = 0x100;
    wire::encode_ddp_header(d, h);
    const uint8_t payload[4] = {9, 9, 9, 9};
    p.send_fpdu(h, payload);
    std::vector<uint8_t> keep;
    EXPECT_EQ(p.read_terminate(keep).control.code, code(0, 2, 0x06));
}

TEST(ErrorPathRaw, TerminateStillSentAfterPeerHalfClose)
{
    // The bad FPDU is followed at once by the peer's FIN: the QP must still
    // send its Terminate on the open half (RFC 5041 §6.2.1), then close.
    RawPeer p;
    p.send_fpdu(untagged_header(0xC, 0, 1));
    ::shutdown(p.raw, SHUT_WR);
    std::vector<uint8_t> keep;
    EXPECT_EQ(p.read_terminate(keep).control.code, code(0, 2, 0x06));
    uint8_t b[16];
    EXPECT_EQ(::read(p.raw, b, sizeof b), 0);  // then FIN
    ASSERT_TRUE(p.side.wait_state(QpState::err));
}

TEST(ErrorPathRaw, PeerTerminateMovesQpToErrorAndFlushes)
{
    RawPeer p;
    std::vector<uint8_t> dst(64);
    auto* mr = p.side.reg(dst.data(), 64);
    ASSERT_EQ(p.side.post_recv(dst.data(), 64, mr, 1), 0);
    uint8_t ulpdu[wire::terminate_ulpdu_max_size];
    wire::TerminateCause cause{code(0, 0, 0), {}, std::nullopt};
    const size_t n = wire::build_terminate_ulpdu(cause, 1, ulpdu);
    p.send_fpdu({ulpdu, n});
    ASSERT_TRUE(p.side.wait_state(QpState::err));
    const auto got = p.side.qp->last_terminate_received();
    EXPECT_TRUE(got.valid);
    EXPECT_EQ(got.code, code(0, 0, 0));
    auto r = p.side.wait(p.side.rcq, 1);
    ASSERT_EQ(r.size(), 1u);
    EXPECT_EQ(r[0].status, WcStatus::wr_flush_err);
    // The QP sends nothing after receiving a Terminate but FIN.
    uint8_t b[16];
    EXPECT_EQ(::read(p.raw, b, sizeof b), 0);
}

}  // namespace
}  // namespace iwemu::test
