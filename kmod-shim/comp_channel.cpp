#include "kmod-shim/comp_channel.h"

#include <cerrno>
#include <cstdint>
#include <cstring>
#include <fcntl.h>
#include <mutex>
#include <poll.h>
#include <sys/uio.h>
#include <unistd.h>
#include <unordered_map>

#include "emulator/emulator.h"
#include "kmod-shim/fd_table.h"

namespace iwemu::shim {
namespace {

std::mutex g_mutex;
std::unordered_map<int, int>& writers()  // read end -> write end
{
    static auto* map = new std::unordered_map<int, int>;  // outlives static destructors (late close())
    return *map;
}

}  // namespace

int comp_channel_create()
{
    // A pipe, not a datagram socket: AF_UNIX datagram/seqpacket queues hold
    // only net.unix.max_dgram_qlen packets (10 on many hosts), so a channel
    // shared by more CQs than that lost events.  A pipe stores 8-byte events
    // back to back: 8192 in the default 64 KiB, 131072 in 1 MiB (asked for
    // here; the unprivileged limit is fs.pipe-max-size, usually 1 MiB).  Each
    // CQ has at most one event per arm queued, so that covers max_cq CQs.
    int sv[2];
    if (pipe2(sv, O_CLOEXEC) != 0) return -1;
    fcntl(sv[1], F_SETPIPE_SZ, 1 << 20);  // best effort; 64 KiB otherwise
    // The emulator side never blocks.
    fcntl(sv[1], F_SETFL, fcntl(sv[1], F_GETFL) | O_NONBLOCK);
    {
        std::lock_guard lock(g_mutex);
        writers()[sv[0]] = sv[1];
    }
    fd_table_set(sv[0], {FdKind::comp_channel, 0});
    return sv[0];
}

void comp_channel_close(int fd)
{
    int writer = -1;
    {
        std::lock_guard lock(g_mutex);
        auto it = writers().find(fd);
        if (it == writers().end()) return;
        writer = it->second;
        writers().erase(it);
    }
    fd_table_clear(fd);
    close(writer);
}

ssize_t comp_channel_read(int fd, void* buf, size_t len, ssize_t (*real_read)(int, void*, size_t))
{
    uint64_t record;  // one ib_uverbs_comp_event_desc
    if (len < sizeof record) return real_read(fd, buf, len);
    // An event already queued is the common case (an event loop reads until
    // EAGAIN, or reads after poll()): one system call for it.
    iovec iov{buf, len};
    const ssize_t n = preadv2(fd, &iov, 1, -1, RWF_NOWAIT);
    if (n >= 0 || (errno != EAGAIN && errno != EOPNOTSUPP && errno != EINVAL)) return n;
    const bool empty = n < 0 && errno == EAGAIN;  // else a kernel without RWF_NOWAIT for pipes
    const int flags = fcntl(fd, F_GETFL);
    if (flags < 0 || (flags & O_NONBLOCK)) return real_read(fd, buf, len);
    pollfd queued{fd, POLLIN, 0};
    if (empty || poll(&queued, 1, 0) == 0) {
        switch (Emulator::instance().wait_channel(fd, &record)) {
        case Emulator::ChannelWait::event:
            std::memcpy(buf, &record, sizeof record);
            return sizeof record;
        case Emulator::ChannelWait::interrupted:
            errno = EINTR;
            return -1;
        case Emulator::ChannelWait::ready:
        case Emulator::ChannelWait::not_handled:
            break;
        }
    }
    return real_read(fd, buf, len);
}

}  // namespace iwemu::shim

extern "C" int iwemu_shim_comp_channel_sender(int channel_fd)
{
    std::lock_guard lock(iwemu::shim::g_mutex);
    auto it = iwemu::shim::writers().find(channel_fd);
    if (it == iwemu::shim::writers().end()) {
        errno = EINVAL;
        return -1;
    }
    return fcntl(it->second, F_DUPFD_CLOEXEC, 0);
}
