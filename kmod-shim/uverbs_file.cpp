#include "kmod-shim/uverbs_file.h"

#include <cerrno>
#include <mutex>
#include <unordered_map>

namespace iwemu::shim {
namespace {

struct FdFile {
    uint64_t file = 0;
    int pending_async_fd = -1;  // offered by the provider for the next ASYNC_EVENT/ALLOC
};

std::mutex g_mutex;
uint64_t g_next_file = 1;

std::unordered_map<int, FdFile>& files()
{
    static auto* map = new std::unordered_map<int, FdFile>;  // never destroyed: used from late close()
    return *map;
}

}  // namespace

void uverbs_file_open(int fd)
{
    std::lock_guard lock(g_mutex);
    files()[fd] = {g_next_file++, -1};
}

void uverbs_file_dup(int oldfd, int newfd)
{
    std::lock_guard lock(g_mutex);
    auto it = files().find(oldfd);
    if (it == files().end()) return;
    files()[newfd] = {it->second.file, -1};
}

void uverbs_file_close(int fd)
{
    std::lock_guard lock(g_mutex);
    files().erase(fd);
}

int uverbs_file_take_async_fd(int fd)
{
    std::lock_guard lock(g_mutex);
    auto it = files().find(fd);
    if (it == files().end()) return -1;
    const int async_fd = it->second.pending_async_fd;
    it->second.pending_async_fd = -1;
    return async_fd;
}

}  // namespace iwemu::shim

extern "C" uint64_t iwemu_shim_uverbs_file(int fd)
{
    std::lock_guard lock(iwemu::shim::g_mutex);
    auto it = iwemu::shim::files().find(fd);
    return it == iwemu::shim::files().end() ? 0 : it->second.file;
}

extern "C" int iwemu_shim_uverbs_offer_async_fd(int cmd_fd, int async_fd)
{
    std::lock_guard lock(iwemu::shim::g_mutex);
    auto it = iwemu::shim::files().find(cmd_fd);
    if (it == iwemu::shim::files().end()) {
        errno = EBADF;
        return -1;
    }
    it->second.pending_async_fd = async_fd;
    return 0;
}
