// Verbs objects without a connection: QP state table and modify/query
// errnos, posting rules, STag table (keys, PD/access/bounds, 1 GiB in O(1),
// invalidation), CQ overflow and arming, SRQ limit event, device attributes,
// configuration parsing.
#include <sys/mman.h>

#include "emulator/qp/qp_state.h"
#include "tests/emulator/qp_loopback_fixture.h"

namespace iwemu::test {
namespace {

TEST(QpStateTable, VerbsTransitions)
{
    EXPECT_EQ(verbs_transition(QpState::reset, QpState::init, false).error, 0);
    EXPECT_EQ(verbs_transition(QpState::reset, QpState::rts, false).error, EINVAL);
    EXPECT_EQ(verbs_transition(QpState::reset, QpState::rtr, false).error, EINVAL);
    EXPECT_EQ(verbs_transition(QpState::init, QpState::rtr, false).error, 0);
    EXPECT_EQ(verbs_transition(QpState::rtr, QpState::rts, false).error, 0);
    EXPECT_EQ(verbs_transition(QpState::rts, QpState::init, true).error, EINVAL);
    EXPECT_EQ(verbs_transition(QpState::err, QpState::rts, false).error, EINVAL);
    EXPECT_EQ(verbs_transition(QpState::sqe, QpState::rts, false).error, 0);
    auto t = verbs_transition(QpState::rts, QpState::err, true);
    EXPECT_TRUE(t.flush);
    EXPECT_TRUE(t.abort);
    t = verbs_transition(QpState::rts, QpState::sqd, true);
    EXPECT_TRUE(t.close);
    t = verbs_transition(QpState::err, QpState::reset, false);
    EXPECT_TRUE(t.reset);
    EXPECT_EQ(verbs_transition(static_cast<QpState>(9), QpState::err, false).error, EINVAL);
    EXPECT_EQ(iwarp_state_of(QpState::rtr), IwarpState::idle);
    EXPECT_EQ(iwarp_state_of(QpState::sqd), IwarpState::closing);
    EXPECT_EQ(iwarp_state_of(QpState::sqe), IwarpState::terminate);
    EXPECT_EQ(on_iwarp_event(QpState::init, IwarpEvent::connection_attached), QpState::rts);
    EXPECT_EQ(on_iwarp_event(QpState::rts, IwarpEvent::terminate_received), QpState::sqe);
    EXPECT_EQ(on_iwarp_event(QpState::sqe, IwarpEvent::flushed), QpState::err);
    EXPECT_EQ(on_iwarp_event(QpState::reset, IwarpEvent::llp_closed), QpState::reset);
}

TEST(IbvValues, MatchLibibverbs)
{
    // Spot checks against <infiniband/verbs.h> numbering (documented 1:1 mapping).
    EXPECT_EQ(static_cast<int>(WcStatus::wr_flush_err), 5);
    EXPECT_EQ(static_cast<int>(WcStatus::rem_access_err), 10);
    EXPECT_EQ(static_cast<int>(WcStatus::general_err), 21);
    EXPECT_EQ(static_cast<int>(WcOpcode::recv), 128);
    EXPECT_EQ(static_cast<int>(WrOpcode::send_with_inv), 9);
    EXPECT_EQ(static_cast<int>(WrOpcode::local_inv), 7);
    EXPECT_EQ(static_cast<int>(AsyncEventType::srq_limit_reached), 15);
    EXPECT_EQ(static_cast<int>(AsyncEventType::qp_access_err), 3);
    EXPECT_EQ(static_cast<int>(QpState::err), 6);
    EXPECT_EQ(qp_attr_max_dest_rd_atomic, 1u << 17);
}

struct Objects : ::testing::Test {
    Emulator emu{Config{}};
    ProtectionDomain* pd = nullptr;
    CompletionQueue* cq = nullptr;
    void SetUp() override
    {
        ASSERT_EQ(emu.alloc_pd(&pd), 0);
        ASSERT_EQ(emu.create_cq(16, &cq), 0);
    }
    QueuePair* make_qp(QpCap cap = {4, 4, 2, 2, 16}, SharedReceiveQueue* srq = nullptr)
    {
        QpInitAttr ia;
        ia.send_cq = ia.recv_cq = cq;
        ia.cap = cap;
        ia.srq = srq;
        QueuePair* qp = nullptr;
        EXPECT_EQ(emu.create_qp(pd, ia, &qp), 0);
        return qp;
    }
};

TEST_F(Objects, DeviceAttributesAtLeastSiw)
{
    const auto& d = emu.device_attributes();
    EXPECT_GE(d.max_sge, 6u);
    EXPECT_GE(d.max_sge_rd, 6u);
    EXPECT_GE(d.max_inline_data, 80u);
    EXPECT_GE(d.max_qp_rd_atom, 128u);
    EXPECT_GE(d.max_qp_init_rd_atom, 128u);
    EXPECT_GE(d.max_qp, 100u * 1024);
    EXPECT_GE(d.max_qp_wr, 32u * 1024);
    EXPECT_GE(d.max_mr, 1024u * 1024);
    EXPECT_FALSE(d.fw_ver.empty());
    EXPECT_EQ(emu.port_attributes().state, 4u);
    EXPECT_EQ(emu.port_attributes().active_mtu, 5u);
    EXPECT_FALSE(emu.identity().gids.empty());
}

TEST_F(Objects, CreateQpChecksCapsAndGrants)
{
    QpInitAttr ia;
    ia.send_cq = ia.recv_cq = cq;
    QueuePair* qp;
    ia.cap = {limits::max_qp_wr + 1, 1, 1, 1, 0};
    EXPECT_EQ(emu.create_qp(pd, ia, &qp), EINVAL);
    ia.cap = {1, 1, limits::max_sge + 1, 1, 0};
    EXPECT_EQ(emu.create_qp(pd, ia, &qp), EINVAL);
    ia.cap = {1, 1, 1, 1, limits::max_inline_data + 1};
    EXPECT_EQ(emu.create_qp(pd, ia, &qp), EINVAL);
    ia.send_cq = nullptr;
    ia.cap = {1, 1, 1, 1, 0};
    EXPECT_EQ(emu.create_qp(pd, ia, &qp), EINVAL);
    ia.send_cq = cq;
    ia.cap = {0, 0, 0, 0, 0};
    ASSERT_EQ(emu.create_qp(pd, ia, &qp), 0);
    EXPECT_EQ(ia.cap.max_send_wr, 1u);
    EXPECT_EQ(qp->state(), QpState::init);  // iWARP IDLE, as siw and cxgb4 report it
    EXPECT_EQ(emu.destroy_cq(cq), EBUSY);
    EXPECT_EQ(emu.dealloc_pd(pd), EBUSY);
    EXPECT_EQ(emu.destroy_qp(qp), 0);
    EXPECT_EQ(emu.destroy_cq(cq), 0);
    EXPECT_EQ(emu.dealloc_pd(pd), 0);
}

// Every QP is granted the device's inline maximum, whatever it asked for,
// and create_qp says so: rsockets on iWARP takes the granted size as its own
// and refuses a QP under 4 octets (rs_create_ep: ENOTSUP), which is how
// rstream's bandwidth tests and riostream's bandwidth phase (inline 0) run
// over iwemu.  Kernel siw returns the size asked for here, and they are
// refused there (docs/limits.md, "Inline data").
TEST_F(Objects, CreateQpGrantsTheDeviceInlineMaximumWhateverAsked)
{
    for (uint32_t asked : {0u, 4u, limits::max_inline_data}) {
        QpInitAttr ia;
        ia.send_cq = ia.recv_cq = cq;
        ia.cap = {16, 16, 2, 1, asked};
        QueuePair* qp;
        ASSERT_EQ(emu.create_qp(pd, ia, &qp), 0);
        EXPECT_EQ(ia.cap.max_inline_data, limits::max_inline_data) << "asked " << asked;
        QpAttr qa;
        QpInitAttr qi;
        ASSERT_EQ(qp->query(&qa, &qi), 0);
        EXPECT_EQ(qa.cap.max_inline_data, limits::max_inline_data) << "asked " << asked;
        EXPECT_EQ(emu.destroy_qp(qp), 0);
    }
}

TEST_F(Objects, ModifyQueryAndPostingRules)
{
    QueuePair* qp = make_qp();
    std::vector<uint8_t> buf(64);
    MemoryRegion* mr;
    ASSERT_EQ(emu.reg_mr(pd, buf.data(), 64, reinterpret_cast<uint64_t>(buf.data()), access_local_write, &mr), 0);
    Sge sge{reinterpret_cast<uint64_t>(buf.data()), 64, mr->lkey()};
    RecvWr rw{1, &sge, 1};
    SendWr sw;
    sw.sg_list = &sge;
    sw.num_sge = 1;
    size_t bad = 99;
    QpAttr a;
    // Created in INIT; RESET (asked for) refuses posting.
    a.qp_state = QpState::reset;
    ASSERT_EQ(qp->modify(a, qp_attr_state), 0);
    EXPECT_EQ(qp->post_recv(&rw, 1, &bad), EINVAL);
    EXPECT_EQ(qp->post_send(&sw, 1, &bad), EINVAL);
    a.qp_state = QpState::rts;
    EXPECT_EQ(qp->modify(a, qp_attr_state), EINVAL);  // RESET → RTS
    a.qp_state = QpState::init;
    a.cur_qp_state = QpState::rts;
    EXPECT_EQ(qp->modify(a, qp_attr_state | qp_attr_cur_state), EINVAL);
    EXPECT_EQ(qp->modify(a, qp_attr_state | qp_attr_alt_path), EOPNOTSUPP);
    a.max_rd_atomic = 200;
    EXPECT_EQ(qp->modify(a, qp_attr_state | qp_attr_max_qp_rd_atomic), EINVAL);
    a.max_rd_atomic = 7;
    a.max_dest_rd_atomic = 9;
    ASSERT_EQ(qp->modify(a, qp_attr_state | qp_attr_max_qp_rd_atomic | qp_attr_max_dest_rd_atomic), 0);
    QpAttr q;
    QpInitAttr qi;
    ASSERT_EQ(qp->query(&q, &qi), 0);
    EXPECT_EQ(q.qp_state, QpState::init);
    EXPECT_EQ(q.max_rd_atomic, 7);
    EXPECT_EQ(q.max_dest_rd_atomic, 9);
    EXPECT_EQ(qi.cap.max_send_wr, 4u);
    // INIT: receives are queued; a full RQ gives ENOMEM with the index.
    RecvWr five[5] = {rw, rw, rw, rw, rw};
    EXPECT_EQ(qp->post_recv(five, 5, &bad), ENOMEM);
    EXPECT_EQ(bad, 4u);
    Sge many[3] = {sge, sge, sge};
    RecvWr big{2, many, 3};
    EXPECT_EQ(qp->post_recv(&big, 1, &bad), 0 == 1 ? 0 : EINVAL);  // 3 SGEs > max_recv_sge 2
    // Sends queue until a connection exists; too many SGEs is EINVAL.
    SendWr s3 = sw;
    s3.sg_list = many;
    s3.num_sge = 3;
    EXPECT_EQ(qp->post_send(&s3, 1, &bad), EINVAL);
    sw.opcode = WrOpcode::send_with_imm;  // no RFC 7306 form (docs/limits.md)
    EXPECT_EQ(qp->post_send(&sw, 1, &bad), EOPNOTSUPP);
    sw.opcode = WrOpcode::send;
    sw.send_flags = send_signaled;
    EXPECT_EQ(qp->post_send(&sw, 1, &bad), 0);
    // → ERR flushes everything, in order, signaled or not.
    a.qp_state = QpState::err;
    ASSERT_EQ(qp->modify(a, qp_attr_state), 0);
    Completion wc[8];
    int n = cq->poll(wc, 8);
    ASSERT_EQ(n, 5);
    EXPECT_EQ(wc[0].opcode, WcOpcode::send);
    for (int i = 0; i < n; ++i) EXPECT_EQ(wc[i].status, WcStatus::wr_flush_err);
    // Posting in ERR completes at once.
    EXPECT_EQ(qp->post_recv(&rw, 1, &bad), 0);
    ASSERT_EQ(cq->poll(wc, 8), 1);
    EXPECT_EQ(wc[0].status, WcStatus::wr_flush_err);
    EXPECT_EQ(wc[0].opcode, WcOpcode::recv);
    // ERR → RESET → INIT works again.
    a.qp_state = QpState::reset;
    ASSERT_EQ(qp->modify(a, qp_attr_state), 0);
    a.qp_state = QpState::init;
    ASSERT_EQ(qp->modify(a, qp_attr_state), 0);
    EXPECT_EQ(qp->post_recv(&rw, 1, &bad), 0);
    EXPECT_EQ(cq->poll(wc, 8), 0);
    EXPECT_EQ(emu.dereg_mr(mr), 0);
}

// ibv_wr_complete's batches (whole = true): all or nothing.  A QP is created
// in INIT, where Sends wait in the SQ for RTS, so the SQ's room shows what
// was posted.
TEST_F(Objects, WholeBatchPostsAllOrNothing)
{
    QueuePair* qp = make_qp({4, 4, 2, 2, 16});
    SendWr batch[5];
    for (int i = 0; i < 5; ++i) batch[i].wr_id = 10 + i;
    size_t bad = 99;
    // More than the SQ holds: refused whole; *bad names the first that does not fit.
    EXPECT_EQ(qp->post_send(batch, 5, &bad, true), ENOMEM);
    EXPECT_EQ(bad, 4u);
    // The second WR is bad: the first is not posted either.
    batch[1].opcode = WrOpcode::send_with_imm;
    EXPECT_EQ(qp->post_send(batch, 2, &bad, true), EOPNOTSUPP);
    EXPECT_EQ(bad, 1u);
    batch[1].opcode = WrOpcode::send;
    // Nothing taken so far: exactly 4 fit, then none.
    EXPECT_EQ(qp->post_send(batch, 4, &bad, true), 0);
    EXPECT_EQ(qp->post_send(batch, 1, &bad, true), ENOMEM);
    // Without whole, ibv_post_send's rule: what fits is posted.
    QueuePair* q2 = make_qp({4, 4, 2, 2, 16});
    EXPECT_EQ(q2->post_send(batch, 5, &bad), ENOMEM);
    EXPECT_EQ(bad, 4u);
    EXPECT_EQ(q2->post_send(batch, 1, &bad, true), ENOMEM);
    // In ERR a refused batch flushes nothing; a good one flushes every WR.
    QpAttr a;
    a.qp_state = QpState::err;
    ASSERT_EQ(qp->modify(a, qp_attr_state), 0);
    Completion wc[8];
    EXPECT_EQ(cq->poll(wc, 8), 4);  // the 4 queued
    batch[2].num_sge = 3;           // more than max_send_sge
    EXPECT_EQ(qp->post_send(batch, 3, &bad, true), EINVAL);
    EXPECT_EQ(bad, 2u);
    EXPECT_EQ(cq->poll(wc, 8), 0);
    batch[2].num_sge = 0;
    EXPECT_EQ(qp->post_send(batch, 3, &bad, true), 0);
    ASSERT_EQ(cq->poll(wc, 8), 3);
    for (int i = 0; i < 3; ++i) EXPECT_EQ(wc[i].wr_id, 10u + i);
}

TEST_F(Objects, StagTableChecks)
{
    std::vector<uint8_t> buf(4096);
    MemoryRegion* mr;
    const uint64_t base = reinterpret_cast<uint64_t>(buf.data());
    EXPECT_EQ(emu.reg_mr(pd, buf.data(), 0, base, 0, &mr), EINVAL);
    EXPECT_EQ(emu.reg_mr(pd, buf.data(), 4096, base, access_remote_write, &mr), EINVAL);  // needs local write
    ASSERT_EQ(emu.reg_mr(pd, buf.data(), 4096, base, access_local_write | access_remote_write, &mr), 0);
    EXPECT_EQ(mr->lkey(), mr->rkey());
    EXPECT_NE(mr->stag() >> 8, 0u);  // index 0 never used
    auto& t = emu.stags();
    StagError e;
    MemoryRegion* got = t.acquire(mr->rkey(), pd, access_remote_write, base + 100, 100, &e);
    ASSERT_EQ(got, mr);
    StagTable::release(got);
    EXPECT_EQ(t.acquire(mr->rkey() ^ 1, pd, 0, base, 1, &e), nullptr);
    EXPECT_EQ(e, StagError::invalid_stag);
    EXPECT_EQ(t.acquire(mr->rkey(), pd, access_remote_read, base, 1, &e), nullptr);
    EXPECT_EQ(e, StagError::access);
    EXPECT_EQ(t.acquire(mr->rkey(), pd, 0, base + 4000, 97, &e), nullptr);
    EXPECT_EQ(e, StagError::bounds);
    EXPECT_EQ(t.acquire(mr->rkey(), pd, 0, base - 1, 2, &e), nullptr);
    EXPECT_EQ(e, StagError::bounds);
    EXPECT_EQ(t.acquire(mr->rkey(), pd, 0, ~uint64_t{0} - 2, 8, &e), nullptr);
    EXPECT_EQ(e, StagError::to_wrap);
    ProtectionDomain* pd2;
    ASSERT_EQ(emu.alloc_pd(&pd2), 0);
    EXPECT_EQ(t.acquire(mr->rkey(), pd2, 0, base, 1, &e), nullptr);
    EXPECT_EQ(e, StagError::pd_mismatch);
    EXPECT_EQ(t.invalidate(mr->rkey(), pd2), StagError::pd_mismatch);
    EXPECT_EQ(t.invalidate(mr->rkey(), pd), StagError::none);
    EXPECT_EQ(t.invalidate(mr->rkey(), pd), StagError::invalid_stag);  // only once
    EXPECT_EQ(t.acquire(mr->rkey(), pd, 0, base, 1, &e), nullptr);
    const uint32_t old = mr->rkey();
    ASSERT_EQ(emu.dereg_mr(mr), 0);
    // The slot is reused with a different key: the old STag stays dead.
    MemoryRegion* mr2;
    ASSERT_EQ(emu.reg_mr(pd, buf.data(), 4096, base, access_local_write, &mr2), 0);
    EXPECT_EQ(mr2->stag() >> 8, old >> 8);
    EXPECT_NE(mr2->stag(), old);
    EXPECT_EQ(t.acquire(old, pd, 0, base, 1, &e), nullptr);
    EXPECT_EQ(emu.dereg_mr(mr2), 0);
}

TEST_F(Objects, ReregKeepsTheStagAndAppliesTheNewValues)
{
    std::vector<uint8_t> a(4096), b(1024);
    const uint64_t base_a = reinterpret_cast<uint64_t>(a.data()), base_b = reinterpret_cast<uint64_t>(b.data());
    MemoryRegion* mr;
    ASSERT_EQ(emu.reg_mr(pd, a.data(), a.size(), base_a, access_local_write | access_remote_write, &mr), 0);
    const uint32_t stag = mr->stag();
    auto& t = emu.stags();
    StagError e;
    // The rights: remote write taken away.
    ASSERT_EQ(emu.rereg_mr(mr, pd, a.data(), a.size(), base_a, access_local_write), 0);
    EXPECT_EQ(mr->stag(), stag);
    EXPECT_EQ(t.acquire(stag, pd, access_remote_write, base_a, 1, &e), nullptr);
    EXPECT_EQ(e, StagError::access);
    // The memory: the old range is out of bounds, the new one in.
    ASSERT_EQ(emu.rereg_mr(mr, pd, b.data(), b.size(), base_b, access_local_write | access_remote_write), 0);
    EXPECT_EQ(t.acquire(stag, pd, access_remote_write, base_a, 1, &e), nullptr);
    EXPECT_EQ(e, StagError::bounds);
    MemoryRegion* got = t.acquire(stag, pd, access_remote_write, base_b + 1000, 24, &e);
    ASSERT_EQ(got, mr);
    EXPECT_EQ(got->at(base_b + 1000), b.data() + 1000);
    StagTable::release(got);
    // The PD: the old one is free of it, the new one busy.
    ProtectionDomain* pd2;
    ASSERT_EQ(emu.alloc_pd(&pd2), 0);
    ASSERT_EQ(emu.rereg_mr(mr, pd2, b.data(), b.size(), base_b, access_local_write), 0);
    EXPECT_EQ(t.acquire(stag, pd, 0, base_b, 1, &e), nullptr);
    EXPECT_EQ(e, StagError::pd_mismatch);
    EXPECT_EQ(emu.dealloc_pd(pd2), EBUSY);
    // reg_mr's checks; a refused rereg changes nothing.
    EXPECT_EQ(emu.rereg_mr(mr, pd2, b.data(), 0, base_b, access_local_write), EINVAL);
    EXPECT_EQ(emu.rereg_mr(mr, pd2, b.data(), b.size(), base_b, access_remote_write), EINVAL);
    EXPECT_EQ(mr->pd(), pd2);
    EXPECT_EQ(mr->access(), access_local_write);
    ASSERT_EQ(emu.dereg_mr(mr), 0);
    EXPECT_EQ(emu.dealloc_pd(pd2), 0);
}

TEST_F(Objects, OneGibRegistrationIsCheap)
{
    const size_t len = size_t{1} << 30;
    void* p = mmap(nullptr, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    ASSERT_NE(p, MAP_FAILED);
    const auto t0 = std::chrono::steady_clock::now();
    MemoryRegion* mr[64];
    for (auto& m : mr)
        ASSERT_EQ(emu.reg_mr(pd, p, len, reinterpret_cast<uint64_t>(p), access_local_write | access_remote_write, &m),
                  0);
    for (auto* m : mr) ASSERT_EQ(emu.dereg_mr(m), 0);
    const auto us = std::chrono::duration_cast<std::chrono::microseconds>(std::chrono::steady_clock::now() - t0);
    EXPECT_LT(us.count(), 20000);  // 64 × 1 GiB: no page walk, no pinning
    munmap(p, len);
}

TEST_F(Objects, CqOverflowRaisesCqErrorOnce)
{
    std::vector<AsyncEvent> events;
    std::mutex m;
    emu.set_async_event_handler([&](const AsyncEvent& e) {
        std::lock_guard<std::mutex> g(m);
        events.push_back(e);
    });
    ASSERT_EQ(emu.create_cq(4, &cq), 0);
    Completion c;
    for (int i = 0; i < 4; ++i) EXPECT_TRUE(cq->push(c, false));
    EXPECT_FALSE(cq->push(c, false));
    EXPECT_FALSE(cq->push(c, false));
    EXPECT_TRUE(cq->overflowed());
    ASSERT_EQ(events.size(), 1u);
    EXPECT_EQ(events[0].type, AsyncEventType::cq_err);
    EXPECT_EQ(events[0].cq, cq);
    Completion out[8];
    EXPECT_EQ(cq->poll(out, 8), 4);  // what it holds is still delivered
}

// ibv_resize_cq: grows and shrinks keeping what is queued, in order; never
// below the queued count or beyond max_cqe; a ring that wrapped stays whole.
TEST_F(Objects, CqResizeKeepsQueuedCompletions)
{
    ASSERT_EQ(emu.create_cq(4, &cq), 0);
    Completion c, out[16];
    for (uint64_t i = 0; i < 3; ++i) {
        c.wr_id = i;
        ASSERT_TRUE(cq->push(c, false));
    }
    ASSERT_EQ(cq->poll(out, 2), 2);  // head moves: the next pushes wrap
    for (uint64_t i = 3; i < 6; ++i) {
        c.wr_id = i;
        ASSERT_TRUE(cq->push(c, false));
    }
    EXPECT_EQ(cq->resize(3), EINVAL);  // 4 queued
    EXPECT_EQ(cq->resize(0), EINVAL);
    EXPECT_EQ(cq->resize(limits::max_cqe + 1), EINVAL);
    ASSERT_EQ(cq->resize(8), 0);
    EXPECT_EQ(cq->capacity(), 8u);
    for (uint64_t i = 6; i < 10; ++i) {
        c.wr_id = i;
        ASSERT_TRUE(cq->push(c, false));  // room that 4 did not have
    }
    ASSERT_EQ(cq->poll(out, 3), 3);
    ASSERT_EQ(cq->resize(5), 0);  // 5 queued: shrinks exactly to them
    EXPECT_FALSE(cq->overflowed());
    ASSERT_EQ(cq->poll(out + 3, 16), 5);
    for (uint64_t i = 0; i < 8; ++i) EXPECT_EQ(out[i].wr_id, i + 2);
}

TEST_F(Objects, CqArmingNextAndSolicited)
{
    int fired = 0;
    cq->set_event_handler([&] { ++fired; });
    Completion c;
    Completion out[4];
    cq->push(c, false);
    EXPECT_EQ(fired, 0);  // not armed
    cq->req_notify(true);
    cq->push(c, false);
    EXPECT_EQ(fired, 0);
    cq->push(c, true);
    EXPECT_EQ(fired, 1);
    cq->poll(out, 4);
    cq->req_notify(false);
    c.status = WcStatus::success;
    cq->push(c, false);
    EXPECT_EQ(fired, 2);
    cq->push(c, false);
    EXPECT_EQ(fired, 2);  // one shot
    cq->poll(out, 4);
    cq->req_notify(true);
    c.status = WcStatus::wr_flush_err;
    cq->push(c, false);  // error completions wake solicited waiters too
    EXPECT_EQ(fired, 3);
}

TEST_F(Objects, SrqLimitEventAndAttachRules)
{
    std::atomic<int> limit_events{0};
    emu.set_async_event_handler([&](const AsyncEvent& e) {
        if (e.type == AsyncEventType::srq_limit_reached) limit_events++;
    });
    SharedReceiveQueue* srq;
    EXPECT_EQ(emu.create_srq(pd, SrqAttr{0, 1, 0}, &srq), EINVAL);
    ASSERT_EQ(emu.create_srq(pd, SrqAttr{8, 2, 0}, &srq), 0);
    QueuePair* qp = make_qp({4, 4, 2, 2, 0}, srq);
    std::vector<uint8_t> buf(64);
    Sge sge{reinterpret_cast<uint64_t>(buf.data()), 64, 0};
    RecvWr rw{1, &sge, 1};
    size_t bad;
    EXPECT_EQ(qp->post_recv(&rw, 1, &bad), EINVAL);  // QP uses the SRQ
    for (int i = 0; i < 4; ++i) ASSERT_EQ(srq->post_recv(&rw, 1, &bad), 0);
    EXPECT_EQ(srq->modify(SrqAttr{0, 0, 3}, srq_attr_limit), 0);
    EXPECT_EQ(srq->modify(SrqAttr{16, 0, 0}, srq_attr_max_wr), EINVAL);
    RecvWqe w;
    ASSERT_TRUE(srq->take(&w));  // 3 left: not below 3
    EXPECT_EQ(limit_events.load(), 0);
    ASSERT_TRUE(srq->take(&w));  // 2 < 3: fires
    EXPECT_EQ(limit_events.load(), 1);
    ASSERT_TRUE(srq->take(&w));
    EXPECT_EQ(limit_events.load(), 1);  // disarmed
    SrqAttr q;
    srq->query(&q);
    EXPECT_EQ(q.srq_limit, 0u);
    EXPECT_EQ(emu.destroy_srq(srq), EBUSY);
    EXPECT_EQ(emu.destroy_qp(qp), 0);
    EXPECT_EQ(emu.destroy_srq(srq), 0);
}

TEST(SrqDatapath, SendsConsumeSharedWqes)
{
    Config cfg;
    LoopbackPair p;
    SharedReceiveQueue* srq;
    ASSERT_EQ(p.b->emu->create_srq(p.b->pd, SrqAttr{16, 2, 0}, &srq), 0);
    // A second pair of QPs whose responder uses the SRQ.
    QueuePair *qa, *qb;
    ASSERT_NO_FATAL_FAILURE(connect_srq_qps(p, srq, 2, 0, &qa, &qb));
    std::vector<uint8_t> dst(4 * 64), src(64, 0x42);
    auto* dmr = p.b->reg(dst.data(), dst.size());
    auto* smr = p.a->reg(src.data(), src.size());
    size_t bad;
    for (int i = 0; i < 4; ++i) {
        Sge s{reinterpret_cast<uint64_t>(dst.data() + i * 64), 64, dmr->lkey()};
        RecvWr rw{static_cast<uint64_t>(i), &s, 1};
        ASSERT_EQ(srq->post_recv(&rw, 1, &bad), 0);
    }
    Sge ss{reinterpret_cast<uint64_t>(src.data()), 64, smr->lkey()};
    SendWr sw;
    sw.sg_list = &ss;
    sw.num_sge = 1;
    for (int i = 0; i < 3; ++i) ASSERT_EQ(qa->post_send(&sw, 1, &bad), 0);
    auto r = p.b->wait(p.b->rcq, 3);
    ASSERT_EQ(r.size(), 3u);
    for (int i = 0; i < 3; ++i) EXPECT_EQ(r[i].wr_id, static_cast<uint64_t>(i));
    EXPECT_EQ(dst[2 * 64], 0x42);
}

TEST(Config, ParsesFileAndRejectsBadValues)
{
    Config c;
    std::string report;
    const int errors = parse_config_text("# comment\ncrc = 0\nmarkers=1\nmpa_rev = 1\nrtr = read,send\n"
                                         "busy_poll = on\nlog = debug\nird = 300\nbogus = 1\nnoequals\n",
                                         c, &report);
    EXPECT_EQ(errors, 3);
    EXPECT_FALSE(c.crc);
    EXPECT_TRUE(c.markers);
    EXPECT_EQ(c.mpa_revision, 1);
    EXPECT_EQ(c.rtr_types, "read,send");
    EXPECT_EQ(c.busy_poll, BusyPoll::on);
    EXPECT_EQ(c.log_level, LogLevel::debug);
    EXPECT_EQ(c.ird, 128);  // 300 refused, default kept
    EXPECT_NE(report.find("line 8"), std::string::npos);
    EXPECT_NE(report.find("bogus"), std::string::npos);
    EXPECT_FALSE(c.set("rtr", "carrier-pigeon", nullptr));
    EXPECT_FALSE(c.set("mpa_rev", "3", nullptr));
}

TEST(Config, MpaRev0SettingAndRevisionZero)
{
    Config c;
    EXPECT_TRUE(c.mpa_rev0_accept);  // permissive by default (RFC 5044 Appendix C)
    EXPECT_TRUE(c.set("mpa_rev0", "off", nullptr));
    EXPECT_FALSE(c.mpa_rev0_accept);
    EXPECT_TRUE(c.set("mpa_rev0", "accept", nullptr));
    EXPECT_TRUE(c.mpa_rev0_accept);
    EXPECT_TRUE(c.set("mpa_rev0", "reject", nullptr));
    EXPECT_FALSE(c.mpa_rev0_accept);
    EXPECT_FALSE(c.set("mpa_rev0", "maybe", nullptr));
    EXPECT_FALSE(c.mpa_start_key);  // RFC 5044 frames by default
    EXPECT_TRUE(c.set("mpa_startup", "startkey", nullptr));
    EXPECT_TRUE(c.mpa_start_key);
    EXPECT_TRUE(c.set("mpa_startup", "frames", nullptr));
    EXPECT_FALSE(c.mpa_start_key);
    EXPECT_TRUE(c.set("mpa_startup", "draft03", nullptr));
    EXPECT_TRUE(c.mpa_start_key);
    EXPECT_FALSE(c.set("mpa_startup", "keys", nullptr));
    EXPECT_TRUE(c.set("mpa_rev", "0", nullptr));
    EXPECT_EQ(c.mpa_revision, 0);
}

TEST(Config, EnvironmentOverridesFile)
{
    char path[] = "/tmp/iwemu_cfg_XXXXXX";
    int fd = mkstemp(path);
    ASSERT_GE(fd, 0);
    const char text[] = "crc = 0\nmpa_timeout_ms = 2000\n";
    ASSERT_EQ(write(fd, text, sizeof text - 1), static_cast<ssize_t>(sizeof text - 1));
    close(fd);
    setenv("IWEMU_CONFIG", path, 1);
    setenv("IWEMU_CRC", "1", 1);
    Config c = load_config();
    unsetenv("IWEMU_CONFIG");
    unsetenv("IWEMU_CRC");
    unlink(path);
    EXPECT_TRUE(c.crc);
    EXPECT_EQ(c.mpa_timeout_ms, 2000u);
    EXPECT_EQ(c.config_file, path);
}

TEST(Singleton, SameInstanceEverywhere)
{
    Emulator& a = Emulator::instance();
    Emulator& b = Emulator::instance();
    EXPECT_EQ(&a, &b);
    EXPECT_EQ(a.device_name(), "iwemu0");
}

}  // namespace
}  // namespace iwemu::test
