// RFC 7306 Immediate Data between two emulators over real TCP: verbs Write
// with Immediate lands its data, completes one receive WQE with the
// immediate value, shares the Send MSN sequence, honours Solicited Event and
// SRQs, and ends in a Terminate + flush when no receive is posted.
#include <cstring>

#include "emulator/wire/terminate_codes.h"
#include "tests/emulator/qp_loopback_fixture.h"

namespace iwemu::test {
namespace {

int post_write_imm(Side& s, void* buf, uint32_t len, MemoryRegion* mr, uint64_t wr_id, void* remote,
                   MemoryRegion* rmr, uint32_t imm, uint32_t flags = send_signaled)
{
    Sge sge{reinterpret_cast<uint64_t>(buf), len, mr->lkey()};
    SendWr wr;
    wr.wr_id = wr_id;
    wr.opcode = WrOpcode::rdma_write_with_imm;
    wr.send_flags = flags;
    wr.sg_list = &sge;
    wr.num_sge = len ? 1 : 0;
    wr.remote_addr = reinterpret_cast<uint64_t>(remote);
    wr.rkey = rmr->rkey();
    wr.imm_data = imm;
    size_t bad;
    return s.qp->post_send(&wr, 1, &bad);
}

struct ImmCase {
    const char* name;
    uint32_t size;
    size_t proxy_chunk;
    bool markers;
};
void PrintTo(const ImmCase& c, std::ostream* os) { *os << c.name; }

class WriteWithImm : public ::testing::TestWithParam<ImmCase> {};

TEST_P(WriteWithImm, LandsDataAndCompletesTheReceiveWithTheImmediate)
{
    const ImmCase& c = GetParam();
    PairOptions o;
    o.proxy_chunk = c.proxy_chunk;
    o.markers_a_to_b = o.markers_b_to_a = c.markers;
    LoopbackPair p(o);
    std::vector<uint8_t> src(c.size + 1), dst(c.size + 1, 0), rbuf(64, 0xEE);
    fill_pattern(src, c.size);
    auto* smr = p.a->reg(src.data(), src.size());
    auto* dmr = p.b->reg(dst.data(), dst.size());
    auto* rmr = p.b->reg(rbuf.data(), rbuf.size());
    ASSERT_EQ(p.b->post_recv(rbuf.data(), 64, rmr, 7), 0);
    ASSERT_EQ(post_write_imm(*p.a, src.data(), c.size, smr, 42, dst.data(), dmr, 0x12345678u), 0);

    const auto r = p.b->wait(p.b->rcq, 1);
    ASSERT_EQ(r.size(), 1u);
    EXPECT_EQ(r[0].status, WcStatus::success);
    EXPECT_EQ(r[0].wr_id, 7u);
    EXPECT_EQ(r[0].opcode, WcOpcode::recv_rdma_with_imm);
    EXPECT_EQ(r[0].wc_flags & wc_with_imm, wc_with_imm);
    EXPECT_EQ(r[0].imm_data_or_inv_rkey, 0x12345678u);
    EXPECT_EQ(r[0].byte_len, c.size);  // the Write's length, as InfiniBand reports it
    // The Write's data is placed before its completion shows (RFC 7306 §6.3).
    EXPECT_EQ(0, std::memcmp(dst.data(), src.data(), c.size));
    EXPECT_EQ(dst[c.size], 0);
    // The immediate value goes in the completion only, not the receive buffer.
    EXPECT_EQ(rbuf, std::vector<uint8_t>(64, 0xEE));

    const auto s = p.a->wait(p.a->scq, 1);
    ASSERT_EQ(s.size(), 1u);
    EXPECT_EQ(s[0].status, WcStatus::success);
    EXPECT_EQ(s[0].wr_id, 42u);
    EXPECT_EQ(s[0].opcode, WcOpcode::rdma_write);
    EXPECT_EQ(s[0].byte_len, c.size);
    // One WQE, one completion each side.
    EXPECT_TRUE(p.b->wait(p.b->rcq, 1, 20ms).empty());
    EXPECT_TRUE(p.a->wait(p.a->scq, 1, 20ms).empty());
    EXPECT_EQ(p.a->qp->state(), QpState::rts);
    EXPECT_EQ(p.b->qp->state(), QpState::rts);
}

INSTANTIATE_TEST_SUITE_P(
    Sizes, WriteWithImm,
    ::testing::Values(ImmCase{"zero_length", 0, 0, false}, ImmCase{"one_octet", 1, 0, false},
                      ImmCase{"one_segment", 4000, 0, false}, ImmCase{"multi_segment", 300000, 0, false},
                      ImmCase{"proxy_split", 70000, 7, false}, ImmCase{"markers", 70000, 0, true}),
    [](const ::testing::TestParamInfo<ImmCase>& i) { return std::string(i.param.name); });

// Sends and Immediate Data share QN 0 and its MSN sequence: interleaved, each
// consumes the next receive WQE, in posting order.
TEST(WriteWithImmOrdering, InterleavedWithSendsConsumesReceivesInOrder)
{
    constexpr int kPairs = 120;  // 240 receives: the RQ holds 256
    // Declared before the QPs, which may read src until they are gone: the
    // last work requests are never polled for.
    std::vector<uint8_t> src(4096), dst(4096 * kPairs), rbuf(64 * 2 * kPairs);
    LoopbackPair p;
    fill_pattern(src, 3);
    auto* smr = p.a->reg(src.data(), src.size());
    auto* dmr = p.b->reg(dst.data(), dst.size());
    auto* rmr = p.b->reg(rbuf.data(), rbuf.size());
    for (int i = 0; i < 2 * kPairs; ++i) ASSERT_EQ(p.b->post_recv(rbuf.data() + 64 * i, 64, rmr, i), 0);
    for (int i = 0; i < kPairs; ++i) {
        ASSERT_EQ(p.a->post_send(WrOpcode::send, src.data(), 16, smr, 2 * i), 0);
        const uint32_t len = 1 + static_cast<uint32_t>(i * 37 % 4096);
        ASSERT_EQ(post_write_imm(*p.a, src.data(), len, smr, 2 * i + 1, dst.data() + 4096 * i, dmr,
                                 0xA0000000u + static_cast<uint32_t>(i), i % 3 ? send_signaled : 0),
                  0);
        // Drain the send CQ now and then so the SQ (256) never fills.
        if (i % 64 == 63) p.a->wait(p.a->scq, 1, 1ms);
    }
    const auto r = p.b->wait(p.b->rcq, 2 * kPairs, 20s);
    ASSERT_EQ(r.size(), static_cast<size_t>(2 * kPairs));
    for (int i = 0; i < kPairs; ++i) {
        const Completion& send = r[2 * i];
        const Completion& imm = r[2 * i + 1];
        EXPECT_EQ(send.wr_id, static_cast<uint64_t>(2 * i));
        EXPECT_EQ(send.opcode, WcOpcode::recv);
        EXPECT_EQ(send.wc_flags & wc_with_imm, 0u);
        EXPECT_EQ(send.byte_len, 16u);
        EXPECT_EQ(imm.wr_id, static_cast<uint64_t>(2 * i + 1));
        EXPECT_EQ(imm.opcode, WcOpcode::recv_rdma_with_imm);
        EXPECT_EQ(imm.imm_data_or_inv_rkey, 0xA0000000u + static_cast<uint32_t>(i));
        EXPECT_EQ(imm.byte_len, 1 + static_cast<uint32_t>(i * 37 % 4096));
        EXPECT_EQ(0, std::memcmp(dst.data() + 4096 * i, src.data(), imm.byte_len)) << i;
    }
    EXPECT_EQ(p.b->qp->state(), QpState::rts);
}

// IBV_SEND_SOLICITED makes it "Immediate Data with Solicited Event" (0x9):
// a CQ armed for solicited completions only fires for that one.
TEST(WriteWithImmOrdering, SolicitedEventWakesASolicitedOnlyArm)
{
    LoopbackPair p;
    std::atomic<int> fired{0};
    p.b->rcq->set_event_handler([&] { fired++; });
    std::vector<uint8_t> src(16), dst(16), rbuf(16);
    auto* smr = p.a->reg(src.data(), 16);
    auto* dmr = p.b->reg(dst.data(), 16);
    auto* rmr = p.b->reg(rbuf.data(), 16);
    for (int i = 0; i < 2; ++i) ASSERT_EQ(p.b->post_recv(rbuf.data(), 16, rmr, i), 0);
    ASSERT_EQ(p.b->rcq->req_notify(true), 0);
    ASSERT_EQ(post_write_imm(*p.a, src.data(), 16, smr, 1, dst.data(), dmr, 1), 0);
    ASSERT_EQ(p.b->wait(p.b->rcq, 1).size(), 1u);
    EXPECT_EQ(fired.load(), 0);
    ASSERT_EQ(post_write_imm(*p.a, src.data(), 16, smr, 2, dst.data(), dmr, 2, send_signaled | send_solicited), 0);
    const auto r = p.b->wait(p.b->rcq, 1);
    ASSERT_EQ(r.size(), 1u);
    EXPECT_EQ(r[0].imm_data_or_inv_rkey, 2u);
    EXPECT_EQ(fired.load(), 1);
}

// The receive WQE may come from an SRQ, like a Send's.
TEST(WriteWithImmOrdering, ConsumesSharedReceiveQueueWqes)
{
    LoopbackPair p;
    SharedReceiveQueue* srq;
    ASSERT_EQ(p.b->emu->create_srq(p.b->pd, SrqAttr{16, 1, 0}, &srq), 0);
    QueuePair *qa, *qb;
    ASSERT_NO_FATAL_FAILURE(connect_srq_qps(p, srq, 1, access_local_write | access_remote_write, &qa, &qb));

    std::vector<uint8_t> dst(256), src(256, 0x5A);
    auto* dmr = p.b->reg(dst.data(), dst.size());
    auto* smr = p.a->reg(src.data(), src.size());
    size_t bad;
    for (int i = 0; i < 3; ++i) {
        RecvWr rw{static_cast<uint64_t>(100 + i), nullptr, 0};  // zero-length receives
        ASSERT_EQ(srq->post_recv(&rw, 1, &bad), 0);
    }
    Sge ss{reinterpret_cast<uint64_t>(src.data()), 64, smr->lkey()};
    for (uint32_t i = 0; i < 3; ++i) {
        SendWr sw;
        sw.opcode = WrOpcode::rdma_write_with_imm;
        sw.send_flags = send_signaled;
        sw.sg_list = &ss;
        sw.num_sge = 1;
        sw.remote_addr = reinterpret_cast<uint64_t>(dst.data() + 64 * i);
        sw.rkey = dmr->rkey();
        sw.imm_data = 0xBEEF0000u + i;
        ASSERT_EQ(qa->post_send(&sw, 1, &bad), 0);
    }
    const auto r = p.b->wait(p.b->rcq, 3);
    ASSERT_EQ(r.size(), 3u);
    for (uint32_t i = 0; i < 3; ++i) {
        EXPECT_EQ(r[i].wr_id, 100u + i);
        EXPECT_EQ(r[i].qp_num, qb->qp_num());
        EXPECT_EQ(r[i].opcode, WcOpcode::recv_rdma_with_imm);
        EXPECT_EQ(r[i].imm_data_or_inv_rkey, 0xBEEF0000u + i);
        EXPECT_EQ(r[i].byte_len, 64u);
    }
    EXPECT_EQ(std::vector<uint8_t>(dst.begin(), dst.begin() + 192), std::vector<uint8_t>(192, 0x5A));
    EXPECT_EQ(dst[192], 0);
}

// No receive posted: as for a Send, DDP 1/2/02 (no buffer) Terminate from
// the Data Sink, both QPs in ERR, later work flushed on both sides.
TEST(WriteWithImmErrors, NoReceivePostedTerminatesAndFlushes)
{
    PairOptions o;
    o.config.rnr_wait_ms = 0;  // siw's behaviour: no RNR wait (rnr_wait_test.cpp)
    LoopbackPair p(o);
    std::vector<uint8_t> src(128), dst(128);
    auto* smr = p.a->reg(src.data(), 128);
    auto* dmr = p.b->reg(dst.data(), 128);
    ASSERT_EQ(post_write_imm(*p.a, src.data(), 128, smr, 9, dst.data(), dmr, 5), 0);
    ASSERT_TRUE(p.b->wait_state(QpState::err));
    ASSERT_TRUE(p.a->wait_state(QpState::err));
    const auto sent = p.b->qp->last_terminate_sent();
    const auto got = p.a->qp->last_terminate_received();
    ASSERT_TRUE(sent.valid);
    ASSERT_TRUE(got.valid);
    const wire::TerminateCode no_buffer{wire::TerminateLayer::ddp, wire::etype::ddp_untagged_buffer,
                                        wire::ecode::ddp_untagged_invalid_msn_no_buffer};
    EXPECT_EQ(sent.code, no_buffer);
    EXPECT_EQ(got.code, no_buffer);
    EXPECT_TRUE(got.had_ddp_header);
    EXPECT_TRUE(p.b->events.wait_async(AsyncEventType::qp_fatal));
    EXPECT_TRUE(p.a->events.wait_async(AsyncEventType::qp_fatal));
    // The WR completed when its Immediate Data left (RFC 5040 §5.5 rule 18),
    // before or after the Terminate came back: once, either way.
    const auto s = p.a->wait(p.a->scq, 2, 200ms);
    ASSERT_EQ(s.size(), 1u);
    EXPECT_EQ(s[0].wr_id, 9u);
    // A receive posted now (QP in ERR) completes flushed at once.
    ASSERT_EQ(p.b->post_recv(dst.data(), 16, dmr, 77), 0);
    const auto r = p.b->wait(p.b->rcq, 1);
    ASSERT_EQ(r.size(), 1u);
    EXPECT_EQ(r[0].wr_id, 77u);
    EXPECT_EQ(r[0].status, WcStatus::wr_flush_err);
    ASSERT_EQ(post_write_imm(*p.a, src.data(), 128, smr, 10, dst.data(), dmr, 6), 0);
    const auto f = p.a->wait(p.a->scq, 1);
    ASSERT_EQ(f.size(), 1u);
    EXPECT_EQ(f[0].wr_id, 10u);
    EXPECT_EQ(f[0].status, WcStatus::wr_flush_err);
    EXPECT_EQ(f[0].opcode, WcOpcode::rdma_write);
}

// With the RNR wait (default), Immediate Data that finds no receive parks
// the receiver like a Send does; a receive posted later completes it.
TEST(WriteWithImmErrors, NoReceivePostedYetWaitsForOne)
{
    PairOptions o;
    o.config.rnr_wait_ms = 10000;
    LoopbackPair p(o);
    std::vector<uint8_t> src(4096), dst(4096), rbuf(16);
    fill_pattern(src, 11);
    auto* smr = p.a->reg(src.data(), src.size());
    auto* dmr = p.b->reg(dst.data(), dst.size());
    auto* rmr = p.b->reg(rbuf.data(), rbuf.size());
    ASSERT_EQ(post_write_imm(*p.a, src.data(), 4096, smr, 1, dst.data(), dmr, 0x77), 0);
    const auto end = std::chrono::steady_clock::now() + 5s;
    while (p.b->qp->counters().rx_rnr_waits.load() == 0 && std::chrono::steady_clock::now() < end)
        std::this_thread::sleep_for(1ms);
    ASSERT_EQ(p.b->qp->counters().rx_rnr_waits.load(), 1u);
    std::this_thread::sleep_for(100ms);  // parked, not failed
    EXPECT_EQ(p.b->qp->state(), QpState::rts);
    EXPECT_TRUE(p.b->wait(p.b->rcq, 1, 10ms).empty());
    ASSERT_EQ(p.b->post_recv(rbuf.data(), 16, rmr, 5), 0);
    const auto r = p.b->wait(p.b->rcq, 1, 5s);
    ASSERT_EQ(r.size(), 1u);
    EXPECT_EQ(r[0].wr_id, 5u);
    EXPECT_EQ(r[0].status, WcStatus::success);
    EXPECT_EQ(r[0].opcode, WcOpcode::recv_rdma_with_imm);
    EXPECT_EQ(r[0].imm_data_or_inv_rkey, 0x77u);
    EXPECT_EQ(r[0].byte_len, 4096u);
    EXPECT_EQ(src, dst);
    EXPECT_EQ(p.b->qp->state(), QpState::rts);
}

TEST(WriteWithImmErrors, SendWithImmStaysUnsupported)
{
    LoopbackPair p;
    std::vector<uint8_t> src(16);
    auto* smr = p.a->reg(src.data(), 16);
    EXPECT_EQ(p.a->post_send(WrOpcode::send_with_imm, src.data(), 16, smr), EOPNOTSUPP);
    EXPECT_EQ(p.a->post_send(WrOpcode::send_with_imm, src.data(), 0, smr), EOPNOTSUPP);
    EXPECT_EQ(p.a->qp->state(), QpState::rts);
}

TEST(WriteWithImmErrors, RefusedWhenRfc7306IsOff)
{
    PairOptions o;
    o.config.rfc7306 = false;
    LoopbackPair p(o);
    std::vector<uint8_t> src(16), dst(16);
    auto* smr = p.a->reg(src.data(), 16);
    auto* dmr = p.b->reg(dst.data(), 16);
    EXPECT_EQ(post_write_imm(*p.a, src.data(), 16, smr, 1, dst.data(), dmr, 1), EOPNOTSUPP);
    EXPECT_EQ(p.a->qp->state(), QpState::rts);
}

TEST(WriteWithImmErrors, ConfigKey)
{
    Config c;
    EXPECT_TRUE(c.rfc7306);  // on by default
    std::string report;
    EXPECT_EQ(parse_config_text("rfc7306 = off\n", c, &report), 0);
    EXPECT_FALSE(c.rfc7306);
    EXPECT_EQ(parse_config_text("rfc7306 = maybe\n", c, &report), 1);
    EXPECT_FALSE(c.rfc7306);
}

}  // namespace
}  // namespace iwemu::test
