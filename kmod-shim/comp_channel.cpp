#include "kmod-shim/comp_channel.h"

#include <cerrno>
#include <fcntl.h>
#include <mutex>
#include <sys/socket.h>
#include <unistd.h>
#include <unordered_map>

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
    int sv[2];
    if (socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, sv) != 0) return -1;
    // The emulator side never blocks: one event per arm bounds the queue.
    fcntl(sv[1], F_SETFL, fcntl(sv[1], F_GETFL) | O_NONBLOCK);
    shutdown(sv[0], SHUT_WR);
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
