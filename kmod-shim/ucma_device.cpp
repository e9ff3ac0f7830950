// The ucma_device.h contract: open rdma_cm files by fd number.
#include "kmod-shim/ucma_device.h"

#include <pthread.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstring>
#include <map>
#include <memory>
#include <mutex>

#include "emulator/base/log.h"
#include "kmod-shim/ucma_abi.h"
#include "kmod-shim/ucma_cm_link.h"
#include "kmod-shim/ucma_commands.h"
#include "kmod-shim/ucma_events.h"
#include "kmod-shim/ucma_ids.h"

namespace iwemu::shim {

namespace {

// ucma_owns() runs for every interposed write(): a lock-free flag per fd
// below this bound, the locked map beyond it.
constexpr int fast_fds = 4096;
std::atomic<bool> owned_fast[fast_fds];

std::map<int, std::shared_ptr<UcmaFile>>& files() {
    static auto* table = new std::map<int, std::shared_ptr<UcmaFile>>;  // outlives exit handlers
    return *table;
}

const char* command_name(const void* buf, size_t len) {
    static constexpr const char* names[abi::cmd_count] = {
        "CREATE_ID", "DESTROY_ID", "BIND_IP", "RESOLVE_IP", "RESOLVE_ROUTE", "QUERY_ROUTE",
        "CONNECT", "LISTEN", "ACCEPT", "REJECT", "DISCONNECT", "INIT_QP_ATTR", "GET_EVENT",
        "GET_OPTION", "SET_OPTION", "NOTIFY", "JOIN_IP_MCAST", "LEAVE_MCAST", "MIGRATE_ID",
        "QUERY", "BIND", "RESOLVE_ADDR", "JOIN_MCAST"};
    uint32_t cmd = abi::cmd_count;
    if (len >= sizeof cmd) std::memcpy(&cmd, buf, sizeof cmd);
    return cmd < abi::cmd_count ? names[cmd] : "(bad command)";
}

// fork(): librdmacm state in the child is the parent's copy, but the
// connections, the CM thread and the ids' kernel objects stay with the
// parent (an in-process emulator cannot share them as the kernel shares a
// file).  The child keeps its inherited rdma_cm fds, empty: new ids work,
// inherited ones answer ENOENT.  ucma_lock() is held across fork() so the
// child never inherits it locked.
void fork_prepare() { ucma_lock().lock(); }
void fork_parent() { ucma_lock().unlock(); }
void fork_child() {
    ucma_lock().unlock();
    ucma_forget_all_ids();
    for (auto& [fd, file] : files()) file->events.clear();
    ucma_cm_forget_after_fork();
}

void register_fork_handlers() {
    static std::once_flag once;
    std::call_once(once, [] { pthread_atfork(fork_prepare, fork_parent, fork_child); });
}

void mark(int fd, bool owned) {
    if (fd >= 0 && fd < fast_fds) owned_fast[fd].store(owned, std::memory_order_release);
}

}  // namespace

std::shared_ptr<UcmaFile> ucma_file_by_fd(int fd) {
    std::lock_guard lock(ucma_lock());
    auto it = files().find(fd);
    return it == files().end() ? nullptr : it->second;
}

int ucma_open(int open_flags) {
    register_fork_handlers();
    auto file = ucma_file_create(open_flags);
    if (!file) return -1;
    std::lock_guard lock(ucma_lock());
    files()[file->fd] = file;
    mark(file->fd, true);
    return file->fd;
}

bool ucma_owns(int fd) {
    if (fd >= 0 && fd < fast_fds) return owned_fast[fd].load(std::memory_order_acquire);
    std::lock_guard lock(ucma_lock());
    return files().count(fd) != 0;
}

ssize_t ucma_write(int fd, const void* buf, size_t len) {
    std::shared_ptr<UcmaFile> file = ucma_file_by_fd(fd);
    if (!file) {
        errno = EBADF;
        return -1;
    }
    int rc = ucma_execute(file, buf, len);
    // IWEMU_LOG=debug traces every command; failures the application may
    // not report itself (rdma_disconnect's result is often ignored) at info.
    if (rc < 0 && rc != -EAGAIN && rc != -EAFNOSUPPORT)  // not: polling, librdmacm's AF_IB probe
        IWEMU_LOG(info, "rdma_cm fd %d: %s failed: %s", fd, command_name(buf, len), std::strerror(-rc));
    else
        IWEMU_LOG(debug, "rdma_cm fd %d: %s -> %d", fd, command_name(buf, len), rc);
    if (rc < 0) {
        errno = -rc;
        return -1;
    }
    return static_cast<ssize_t>(len);
}

void ucma_close(int fd) {
    std::shared_ptr<UcmaFile> file;
    {
        std::lock_guard lock(ucma_lock());
        auto it = files().find(fd);
        if (it == files().end()) return;
        file = it->second;
        files().erase(it);
        mark(fd, false);
    }
    ucma_destroy_file_ids(file.get());
}

}  // namespace iwemu::shim
