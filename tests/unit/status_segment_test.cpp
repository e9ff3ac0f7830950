// The status segment (emulator/status/): a QP's slot published by this
// process and read back as another process reads it, concurrently with the
// writer (run under TSan: relaxed single-writer counters, generation
// checks), and stale files of dead pids removed by readers.
#include <gtest/gtest.h>

#include <fcntl.h>
#include <netinet/in.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cstdlib>
#include <string>
#include <thread>

#include "emulator/status/status_reader.h"
#include "emulator/status_publisher.h"

namespace iwemu {
namespace {

class StatusSegment : public ::testing::Test {
protected:
    static void SetUpTestSuite()
    {
        // Before the publisher's first use: a private directory for this binary.
        static std::string dir = [] {
            char tmpl[] = "/tmp/iwemu-status-test.XXXXXX";
            std::string d = mkdtemp(tmpl);
            setenv("XDG_RUNTIME_DIR", d.c_str(), 1);
            return d;
        }();
    }
    static const ProcessStatus* self(const std::vector<ProcessStatus>& all)
    {
        for (const ProcessStatus& p : all)
            if (p.pid == static_cast<uint32_t>(getpid())) return &p;
        return nullptr;
    }
};

TEST_F(StatusSegment, PublishedQpIsReadBackAndRetiredAtRelease)
{
    {
        PublishedQp qp(4242);
        ASSERT_TRUE(qp.published());
        QpStatusSlot& s = qp.slot();
        s.state.store(QpState::rts);
        count(s.counters.tx_fpdus, 3);
        count(s.counters.tx_bytes, 300);
        count(s.counters.terminates_sent[2]);
        count(s.counters.rx_read_requests, 5);
        count(s.counters.tx_read_responses, 2);
        sockaddr_storage a{};
        auto& in = reinterpret_cast<sockaddr_in&>(a);
        in.sin_family = AF_INET;
        in.sin_port = htons(4791);
        in.sin_addr.s_addr = htonl(0x7f000001);
        s.peer.store(a);

        const auto all = read_process_status();
        const ProcessStatus* me = self(all);
        ASSERT_NE(me, nullptr);
        ASSERT_EQ(me->qps.size(), 1u);
        const QpStatus& q = me->qps[0];
        EXPECT_EQ(q.qp_num, 4242u);
        EXPECT_EQ(q.state, 3);
        EXPECT_EQ(q.counters.tx_fpdus, 3u);
        EXPECT_EQ(q.counters.tx_bytes, 300u);
        EXPECT_EQ(q.counters.terminates_sent[2], 1u);
        EXPECT_EQ(q.counters.reads_in_flight(), 3u);
        EXPECT_EQ(format_endpoint(q.peer), "127.0.0.1:4791");
        EXPECT_EQ(format_endpoint(q.local), "-");
        // The directory is private.
        std::string err;
        struct stat st {};
        ASSERT_EQ(stat(status_directory(false, &err).c_str(), &st), 0);
        EXPECT_EQ(st.st_mode & 0777, 0700u);
    }
    const ProcessStatus* me = nullptr;
    const auto all = read_process_status();
    me = self(all);
    ASSERT_NE(me, nullptr);
    EXPECT_TRUE(me->qps.empty());
    EXPECT_GE(me->retired.tx_bytes, 300u);  // the port's sums keep a destroyed QP's counters
}

// A fault-injection rule that fires on a QP (emulator/faults) is counted
// in that QP's slot, and in no other.
TEST_F(StatusSegment, FaultsFiredAreCountedOnTheirQp)
{
    PublishedQp a(5151), b(5152);
    ASSERT_TRUE(a.published() && b.published());
    StatusPublisher::instance().count_fault(5152);
    StatusPublisher::instance().count_fault(5152);
    StatusPublisher::instance().count_fault(999999);  // no such QP: nothing
    EXPECT_EQ(a.slot().counters.faults_fired.load(), 0u);
    EXPECT_EQ(b.slot().counters.faults_fired.load(), 2u);
}

TEST_F(StatusSegment, ReaderRacesTheWriterSafely)
{
    PublishedQp qp(77);
    std::atomic<bool> done{false};
    std::thread writer([&] {
        QpCounters& c = qp.slot().counters;
        for (int i = 0; i < 200000; ++i) {
            count(c.rx_fpdus);
            count(c.rx_bytes, 64);
        }
        done = true;
    });
    uint64_t last = 0;
    int reads = 0;
    while (!done.load() || reads < 3) {
        for (const ProcessStatus& p : read_process_status({false, false}))
            for (const QpStatus& q : p.qps)
                if (p.pid == static_cast<uint32_t>(getpid()) && q.qp_num == 77) {
                    EXPECT_GE(q.counters.rx_fpdus, last);  // single writer: never backwards
                    last = q.counters.rx_fpdus;
                }
        ++reads;
    }
    writer.join();
    EXPECT_EQ(qp.slot().counters.rx_bytes.load(), 200000u * 64);
}

TEST_F(StatusSegment, StaleFileOfADeadPidIsRemoved)
{
    PublishedQp qp(5);  // makes sure the directory exists
    std::string err;
    const std::string dir = status_directory(false, &err);
    ASSERT_FALSE(dir.empty()) << err;
    const pid_t child = fork();
    if (child == 0) _exit(0);
    ASSERT_GT(child, 0);
    waitpid(child, nullptr, 0);
    const std::string stale = dir + "/" + std::to_string(child) + ".shm";
    const int fd = open(stale.c_str(), O_CREAT | O_WRONLY, 0600);
    ASSERT_GE(fd, 0);
    ASSERT_EQ(ftruncate(fd, static_cast<off_t>(kStatusFileSize)), 0);  // no header: magic 0
    close(fd);
    for (const ProcessStatus& p : read_process_status()) EXPECT_NE(p.pid, static_cast<uint32_t>(child));
    EXPECT_NE(access(stale.c_str(), F_OK), 0) << stale << " is still there";
}

}  // namespace
}  // namespace iwemu
