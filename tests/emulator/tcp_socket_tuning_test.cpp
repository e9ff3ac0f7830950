// The congestion control setting (key tcp_congestion, IWEMU_TCP_CONGESTION):
// what it accepts, what auto chooses, and that a QP's socket runs what the
// QP reports, never a pacing BBR on a loopback pair under auto.
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <cstring>
#include <fstream>
#include <string>

#include "emulator/tcp_socket_tuning.h"
#include "tests/emulator/qp_loopback_fixture.h"

namespace iwemu::test {
namespace {

std::string socket_congestion(int fd)
{
    char name[tcp_ca_name_max] = {};
    socklen_t len = sizeof name;
    if (getsockopt(fd, IPPROTO_TCP, TCP_CONGESTION, name, &len) != 0) return "?";
    return std::string(name, strnlen(name, sizeof name));
}

TEST(TcpCongestion, SettingTakesAutoSystemOrAnAlgorithmName)
{
    Config c;
    std::string err;
    EXPECT_EQ(c.tcp_congestion, "auto");
    for (const char* good : {"system", "reno", "cubic", "bbr", "dctcp", "auto"}) {
        EXPECT_TRUE(c.set("tcp_congestion", good, &err)) << good << ": " << err;
        EXPECT_EQ(c.tcp_congestion, good);
    }
    for (const char* bad : {"", "Cubic", "cu bic", "reno;", "sixteen_chars_xx", "../x"}) {
        Config d;
        EXPECT_FALSE(d.set("tcp_congestion", bad, &err)) << bad;
        EXPECT_EQ(d.tcp_congestion, "auto") << bad;
        EXPECT_NE(err.find("tcp_congestion"), std::string::npos) << err;
    }
}

TEST(TcpCongestion, AutoReplacesOnlyBbrAndOnlyOnThisHost)
{
    EXPECT_EQ(congestion_control_for("auto", "bbr", true), "cubic");
    EXPECT_EQ(congestion_control_for("auto", "bbr", false), "");
    EXPECT_EQ(congestion_control_for("auto", "cubic", true), "");
    EXPECT_EQ(congestion_control_for("auto", "reno", true), "");
    EXPECT_EQ(congestion_control_for("system", "bbr", true), "");
    EXPECT_EQ(congestion_control_for("reno", "bbr", false), "reno");
    EXPECT_EQ(congestion_control_for("reno", "reno", true), "");
}

TEST(TcpCongestion, AppliedToTheSocketAndAFailureKeepsTheSystemChoice)
{
    auto [a, b] = tcp_pair();
    const std::string before = socket_congestion(a);
    // reno is built into every Linux kernel and always allowed.
    EXPECT_EQ(apply_congestion_control(a, "reno", true), "reno");
    EXPECT_EQ(socket_congestion(a), "reno");
    EXPECT_EQ(apply_congestion_control(a, "system", true), "reno");
    EXPECT_EQ(socket_congestion(a), "reno");
    EXPECT_EQ(apply_congestion_control(b, "no_such_algo", true), before);
    EXPECT_EQ(socket_congestion(b), before);
    // Where this kernel lets the socket run BBR, auto takes it off again.
    const char bbr[] = "bbr";
    if (setsockopt(b, IPPROTO_TCP, TCP_CONGESTION, bbr, sizeof bbr - 1) == 0) {
        EXPECT_EQ(apply_congestion_control(b, "auto", true), "cubic");
        EXPECT_EQ(socket_congestion(b), "cubic");
        ASSERT_EQ(setsockopt(b, IPPROTO_TCP, TCP_CONGESTION, bbr, sizeof bbr - 1), 0);
        EXPECT_EQ(apply_congestion_control(b, "auto", false), "bbr");
        EXPECT_EQ(socket_congestion(b), "bbr");
    }
    ::close(a);
    ::close(b);
}

TEST(TcpCongestion, ALoopbackPairRunsWhatItReports)
{
    {
        LoopbackPair p;
        for (Side* s : {p.a.get(), p.b.get()}) {
            const std::string cc = socket_congestion(s->qp->socket_fd());
            EXPECT_EQ(s->qp->tcp_congestion(), cc);
            EXPECT_NE(cc.substr(0, 3), "bbr");
        }
    }
    PairOptions o;
    std::string err;
    ASSERT_TRUE(o.config.set("tcp_congestion", "reno", &err)) << err;
    LoopbackPair p(o);
    EXPECT_EQ(socket_congestion(p.a->qp->socket_fd()), "reno");
    EXPECT_EQ(socket_congestion(p.b->qp->socket_fd()), "reno");
    EXPECT_EQ(p.b->qp->tcp_congestion(), "reno");
}

}  // namespace
}  // namespace iwemu::test
