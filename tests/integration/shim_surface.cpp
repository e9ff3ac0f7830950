// The kernel surface libiwemu-shim.so stands in for, probed directly (run
// under iwemu-run): NETLINK_RDMA refused, /dev/infiniband nodes that exist
// only for iwemu devices, the uverbs command fd (ENOTTY ioctls, write()
// commands, CREATE_COMP_CHANNEL), bad commands rejected, and ordinary fds
// left alone.
#include <fcntl.h>
#include <linux/netlink.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "check.h"

namespace {

struct CmdHdr {
    uint32_t command;
    uint16_t in_words;
    uint16_t out_words;
};

}  // namespace

int main()
{
    // Netlink RDMA is the shim's (never the kernel's ib_core), or refused
    // with IWEMU_NETLINK=off; other netlink families still work.
    errno = 0;
    const char* nl_env = std::getenv("IWEMU_NETLINK");
    if (nl_env && !std::strcmp(nl_env, "off")) {
        CHECK(socket(AF_NETLINK, SOCK_RAW | SOCK_CLOEXEC, 20 /* NETLINK_RDMA */) == -1 && errno == EPROTONOSUPPORT);
    } else {
        int rdma = socket(AF_NETLINK, SOCK_RAW | SOCK_CLOEXEC, 20 /* NETLINK_RDMA */);
        CHECK(rdma >= 0);
        sockaddr_nl self{};
        socklen_t len = sizeof self;
        CHECK(getsockname(rdma, reinterpret_cast<sockaddr*>(&self), &len) == 0 && self.nl_family == AF_NETLINK &&
              len == sizeof self);
        if (rdma >= 0) close(rdma);
    }
    int route = socket(AF_NETLINK, SOCK_RAW | SOCK_CLOEXEC, NETLINK_ROUTE);
    CHECK(route >= 0);
    if (route >= 0) close(route);

    // Device nodes: only those the sysfs tree lists.
    struct stat st {};
    CHECK(stat("/dev/infiniband/uverbs0", &st) == 0 && S_ISCHR(st.st_mode));
    CHECK(stat("/dev/infiniband", &st) == 0 && S_ISDIR(st.st_mode));
    CHECK(access("/dev/infiniband/uverbs0", R_OK | W_OK) == 0);
    struct statx stx {};
    CHECK(statx(AT_FDCWD, "/dev/infiniband/uverbs0", 0, STATX_BASIC_STATS, &stx) == 0 && S_ISCHR(stx.stx_mode) &&
          stx.stx_rdev_major == 231);
    errno = 0;
    CHECK(stat("/dev/infiniband/uverbs7", &st) == -1 && errno == ENOENT);
    errno = 0;
    CHECK(open("/dev/infiniband/uverbs7", O_RDWR) == -1 && errno == ENOENT);

    int fd = open("/dev/infiniband/uverbs0", O_RDWR | O_CLOEXEC);
    CHECK(fd >= 0);
    if (fd >= 0) {
        CHECK(fstat(fd, &st) == 0 && S_ISCHR(st.st_mode));
        errno = 0;
        uint8_t hdr[24] = {};
        CHECK(ioctl(fd, 0xc0181b01ul, hdr) == -1 && errno == ENOTTY);  // RDMA_VERBS_IOCTL

        // Malformed commands: too short, length mismatch, unknown command.
        errno = 0;
        CHECK(write(fd, "abc", 3) == -1 && errno == EINVAL);
        CmdHdr bad{17, 9, 1};
        errno = 0;
        CHECK(write(fd, &bad, sizeof bad) == -1 && errno == EINVAL);
        CmdHdr unknown{1 /* QUERY_DEVICE */, 2, 0};
        errno = 0;
        CHECK(write(fd, &unknown, sizeof unknown) == -1 && errno == EOPNOTSUPP);

        // A bad response pointer is EFAULT (no crash, no leaked channel).
        struct {
            CmdHdr hdr;
            uint64_t response;
        } wild{{17, 4, 1}, 0x10};
        errno = 0;
        CHECK(write(fd, &wild, sizeof wild) == -1 && errno == EFAULT);

        // CREATE_COMP_CHANNEL answers a readable, pollable fd.
        struct {
            CmdHdr hdr;
            uint64_t response;
        } cmd{{17, 4, 1}, 0};
        uint32_t channel = 0xffffffff;
        cmd.response = reinterpret_cast<uintptr_t>(&channel);
        CHECK(write(fd, &cmd, sizeof cmd) == static_cast<ssize_t>(sizeof cmd));
        CHECK(channel != 0xffffffff && fcntl(static_cast<int>(channel), F_GETFD) >= 0);
        if (channel != 0xffffffff) {
            fcntl(static_cast<int>(channel), F_SETFL, O_NONBLOCK);
            uint64_t rec;
            errno = 0;
            CHECK(read(static_cast<int>(channel), &rec, sizeof rec) == -1 && errno == EAGAIN);
            CHECK(close(static_cast<int>(channel)) == 0);
        }
        CHECK(close(fd) == 0);
    }

    // An ordinary fd that reuses the number is no longer treated as uverbs.
    int pipefd[2];
    CHECK(pipe(pipefd) == 0);
    CHECK(write(pipefd[1], "xyz", 3) == 3);
    char buf[4] = {};
    CHECK(read(pipefd[0], buf, 3) == 3 && std::memcmp(buf, "xyz", 3) == 0);
    close(pipefd[0]);
    close(pipefd[1]);

    return iwemu::test::check_exit_status("shim_surface", "all checks passed");
}
