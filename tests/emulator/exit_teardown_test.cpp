// Process exit with the process-wide emulator in use.  qperf calls exit()
// from its SIGURG handler when its peer fails; the handler may interrupt
// the application inside ibv_post_send, with the QP's locks held.  The exit
// teardown (Emulator::close_at_exit) must then give up on that QP instead
// of waiting for a lock its own thread holds (it used to hang forever).
#include <unistd.h>

#include <cstdlib>

#include "tests/emulator/qp_loopback_fixture.h"

namespace iwemu::test {
namespace {

// Runs in a fresh child process (threadsafe death test): exit() is called
// from a CQ event handler, which runs inside post_send with sq_lock_ held,
// exactly where qperf's signal handler interrupted it.
[[noreturn]] void exit_inside_post_send()
{
    alarm(20);  // a hang ends with SIGALRM, never with exit code 0
    Emulator& e = Emulator::instance();
    ProtectionDomain* pd = nullptr;
    CompletionQueue* cq = nullptr;     // qp[0]'s sends: the one armed
    CompletionQueue* other = nullptr;  // everything else
    if (e.alloc_pd(&pd) || e.create_cq(64, &cq) || e.create_cq(64, &other)) std::_Exit(2);
    QueuePair* qp[2] = {};
    for (auto*& q : qp) {
        QpInitAttr ia;
        ia.send_cq = &q == &qp[0] ? cq : other;
        ia.recv_cq = other;
        ia.cap = {16, 16, 1, 1, 0};
        QpAttr a;
        a.qp_state = QpState::init;
        a.qp_access_flags = access_local_write;
        if (e.create_qp(pd, ia, &q) || q->modify(a, qp_attr_state | qp_attr_access_flags)) std::_Exit(3);
    }
    if (attach_tcp_pair(qp[0], qp[1])) std::_Exit(4);
    static char buf[128];  // [0, 64): the Send's source, [64, 128): the receive
    MemoryRegion* mr = nullptr;
    if (e.reg_mr(pd, buf, sizeof buf, reinterpret_cast<uint64_t>(buf), access_local_write, &mr)) std::_Exit(5);
    Sge sge{reinterpret_cast<uint64_t>(buf), 8, mr->lkey()};
    Sge rsge{reinterpret_cast<uint64_t>(buf + 64), 8, mr->lkey()};
    RecvWr rwr{1, &rsge, 1};
    size_t bad;
    if (qp[1]->post_recv(&rwr, 1, &bad)) std::_Exit(6);
    cq->set_event_handler([] { std::exit(0); });
    cq->req_notify(false);
    SendWr wr;
    wr.opcode = WrOpcode::send;
    wr.send_flags = send_signaled;
    wr.sg_list = &sge;
    wr.num_sge = 1;
    qp[0]->post_send(&wr, 1, &bad);
    // The Send's completion, pushed inline under sq_lock_, calls exit().
    std::this_thread::sleep_for(10s);
    std::_Exit(7);
}

TEST(ExitTeardown, ExitInsidePostSendDoesNotHang)
{
    GTEST_FLAG_SET(death_test_style, "threadsafe");
    EXPECT_EXIT(exit_inside_post_send(), ::testing::ExitedWithCode(0), "");
}

}  // namespace
}  // namespace iwemu::test
