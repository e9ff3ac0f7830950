// libc entry points the shim interposes (LD_PRELOAD) to stand in for the
// ib_uverbs and rdma_ucm kernel modules.  Each wrapper decides in O(1)
// whether the call concerns iwemu (a /dev/infiniband path, an fd in the
// fd table, a NETLINK_RDMA socket) and otherwise forwards to the next
// definition (dlsym RTLD_NEXT) untouched.  No exception leaves this file.
#include <dirent.h>
#include <dlfcn.h>
#include <fcntl.h>
#include <linux/netlink.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <sys/xattr.h>
#include <unistd.h>

#include <cerrno>
#include <cstdarg>
#include <cstring>
#include <new>

#include "kmod-shim/comp_channel.h"
#include "kmod-shim/dev_nodes.h"
#include "kmod-shim/fd_table.h"
#include "kmod-shim/provider_loader.h"
#include "kmod-shim/rdma_netlink_socket.h"
#include "kmod-shim/sysfs_redirect.h"
#include "kmod-shim/hw_counter_files.h"
#include "kmod-shim/ucma_device.h"
#include "kmod-shim/uverbs_commands.h"
#include "kmod-shim/uverbs_file.h"

// The rdma_cm emulation is optional at link time (built only when
// kmod-shim/ucma_device.cpp exists); without it rdma_cm answers ENODEV.
namespace iwemu::shim {
__attribute__((weak)) int ucma_open(int open_flags);
__attribute__((weak)) bool ucma_owns(int fd);
__attribute__((weak)) ssize_t ucma_write(int fd, const void* buf, size_t len);
__attribute__((weak)) void ucma_close(int fd);
}  // namespace iwemu::shim

namespace {

using namespace iwemu::shim;

#ifndef NETLINK_RDMA
#define NETLINK_RDMA 20
#endif

template <typename Fn>
Fn next(Fn& slot, const char* name)
{
    // Benign race: every thread stores the same pointer.
    Fn fn = __atomic_load_n(&slot, __ATOMIC_ACQUIRE);
    if (!fn) {
        fn = reinterpret_cast<Fn>(dlsym(RTLD_NEXT, name));
        __atomic_store_n(&slot, fn, __ATOMIC_RELEASE);
    }
    return fn;
}

#define REAL(name) next(real_##name, #name)
#define DECLARE_REAL(name, ret, ...) ret (*real_##name)(__VA_ARGS__) = nullptr

DECLARE_REAL(socket, int, int, int, int);
DECLARE_REAL(open, int, const char*, int, ...);
DECLARE_REAL(open64, int, const char*, int, ...);
DECLARE_REAL(__open_2, int, const char*, int);
DECLARE_REAL(__open64_2, int, const char*, int);
DECLARE_REAL(openat, int, int, const char*, int, ...);
DECLARE_REAL(openat64, int, int, const char*, int, ...);
DECLARE_REAL(__openat_2, int, int, const char*, int);
DECLARE_REAL(__openat64_2, int, int, const char*, int);
DECLARE_REAL(stat, int, const char*, struct stat*);
DECLARE_REAL(stat64, int, const char*, struct stat64*);
DECLARE_REAL(lstat, int, const char*, struct stat*);
DECLARE_REAL(lstat64, int, const char*, struct stat64*);
DECLARE_REAL(fstat, int, int, struct stat*);
DECLARE_REAL(fstat64, int, int, struct stat64*);
DECLARE_REAL(fstatat, int, int, const char*, struct stat*, int);
DECLARE_REAL(fstatat64, int, int, const char*, struct stat64*, int);
DECLARE_REAL(__xstat, int, int, const char*, struct stat*);
DECLARE_REAL(__lxstat, int, int, const char*, struct stat*);
DECLARE_REAL(__fxstat, int, int, int, struct stat*);
DECLARE_REAL(__fxstatat, int, int, int, const char*, struct stat*, int);
DECLARE_REAL(statx, int, int, const char*, int, unsigned int, struct statx*);
DECLARE_REAL(access, int, const char*, int);
DECLARE_REAL(faccessat, int, int, const char*, int, int);
DECLARE_REAL(write, ssize_t, int, const void*, size_t);
DECLARE_REAL(ioctl, int, int, unsigned long, ...);
DECLARE_REAL(close, int, int);
DECLARE_REAL(read, ssize_t, int, void*, size_t);
DECLARE_REAL(bind, int, int, const struct sockaddr*, socklen_t);
DECLARE_REAL(connect, int, int, const struct sockaddr*, socklen_t);
DECLARE_REAL(getsockname, int, int, struct sockaddr*, socklen_t*);
DECLARE_REAL(setsockopt, int, int, int, int, const void*, socklen_t);
DECLARE_REAL(getsockopt, int, int, int, int, void*, socklen_t*);
DECLARE_REAL(send, ssize_t, int, const void*, size_t, int);
DECLARE_REAL(sendto, ssize_t, int, const void*, size_t, int, const struct sockaddr*, socklen_t);
DECLARE_REAL(sendmsg, ssize_t, int, const struct msghdr*, int);
DECLARE_REAL(recv, ssize_t, int, void*, size_t, int);
DECLARE_REAL(recvfrom, ssize_t, int, void*, size_t, int, struct sockaddr*, socklen_t*);
DECLARE_REAL(recvmsg, ssize_t, int, struct msghdr*, int);
DECLARE_REAL(dup, int, int);
DECLARE_REAL(dup2, int, int, int);
DECLARE_REAL(dup3, int, int, int, int);
DECLARE_REAL(fcntl, int, int, int, ...);
DECLARE_REAL(fcntl64, int, int, int, ...);
DECLARE_REAL(opendir, DIR*, const char*);
DECLARE_REAL(chdir, int, const char*);
DECLARE_REAL(readlink, ssize_t, const char*, char*, size_t);
DECLARE_REAL(realpath, char*, const char*, char*);
DECLARE_REAL(__realpath_chk, char*, const char*, char*, size_t);
DECLARE_REAL(canonicalize_file_name, char*, const char*);
DECLARE_REAL(getxattr, ssize_t, const char*, const char*, void*, size_t);
DECLARE_REAL(lgetxattr, ssize_t, const char*, const char*, void*, size_t);
DECLARE_REAL(listxattr, ssize_t, const char*, char*, size_t);
DECLARE_REAL(llistxattr, ssize_t, const char*, char*, size_t);

int fail(int err)
{
    errno = err;
    return -1;
}

// The iwemu branches of the wrappers run C++ (strings, maps, the rdma_cm
// emulation); an exception must not unwind into the application's libc call.
template <typename F>
auto guarded(F&& f) noexcept -> decltype(f())
{
    try {
        return f();
    } catch (const std::bad_alloc&) {
        errno = ENOMEM;
    } catch (...) {
        errno = EIO;
    }
    return -1;
}

bool has_ucma() { return &ucma_open != nullptr; }

// open()/openat() of a /dev/infiniband node; -2 means "not ours".
int open_dev(const char* path, int flags)
{
    DevPath dev = classify_dev_path(path);
    switch (dev.node) {
    case DevNode::none:
        return -2;
    case DevNode::dir:
        return fail(EISDIR);
    case DevNode::uverbs: {
        ensure_provider_loaded();
        // A real character device on which every ioctl answers ENOTTY; the
        // fd table makes write()/ioctl()/fstat() on it ours.
        int fd = REAL(open)("/dev/null", O_RDWR | (flags & O_CLOEXEC));
        if (fd < 0) return -1;
        uverbs_file_open(fd);
        fd_table_set(fd, {FdKind::uverbs_cmd, static_cast<uint8_t>(dev.index)});
        return fd;
    }
    case DevNode::rdma_cm: {
        if (!has_ucma()) return fail(ENODEV);
        int fd = ucma_open(flags);
        if (fd >= 0) fd_table_set(fd, {FdKind::ucma, 0});
        return fd;
    }
    }
    return -2;
}

int stat_dev(const char* path, struct stat* st)
{
    DevPath dev = classify_dev_path(path);
    if (dev.node == DevNode::none) return -2;
    if (dev.node == DevNode::uverbs) ensure_provider_loaded();
    if (dev.node == DevNode::rdma_cm && !has_ucma()) return fail(ENOENT);
    fill_dev_stat(dev, st);
    return 0;
}

DevPath classify_guarded(const char* path) noexcept
{
    try {
        return classify_dev_path(path);
    } catch (...) {
        return {};  // cannot even build the sysfs path: not ours
    }
}

// Rewrites the result of a real fstat() on an fd the shim owns.
void fix_fstat(int fd, struct stat* st)
{
    FdEntry e = fd_table_get(fd);
    if (e.kind == FdKind::uverbs_cmd)
        fill_dev_stat({DevNode::uverbs, e.device}, st);
    else if (e.kind == FdKind::ucma)
        fill_dev_stat({DevNode::rdma_cm, 0}, st);
}

bool is_shim_fd(int fd) { return fd_table_get(fd).kind != FdKind::none; }

// The kernel's release(): forget the fd before the number can be reused.
void release_fd(int fd)
{
    FdEntry e = fd_table_get(fd);
    switch (e.kind) {
    case FdKind::none:
        return;
    case FdKind::uverbs_cmd:
        fd_table_clear(fd);
        uverbs_file_close(fd);
        return;
    case FdKind::comp_channel:
        comp_channel_close(fd);
        return;
    case FdKind::ucma:
        fd_table_clear(fd);
        if (has_ucma()) ucma_close(fd);
        return;
    case FdKind::rdma_netlink:
        rdma_netlink_close(fd);
        return;
    }
}

void release_guarded(int fd)
{
    guarded([fd] {
        release_fd(fd);
        return 0;
    });
}

// newfd was made a copy of oldfd (dup, dup2, dup3, F_DUPFD): a uverbs fd's
// copy is that device's cmd fd on the same open file (uverbs_file.h), as
// the kernel's struct file is shared.  Other kinds keep one owner fd.
void copy_fd(int oldfd, int newfd)
{
    if (newfd < 0 || newfd == oldfd) return;
    FdEntry e = fd_table_get(oldfd);
    if (e.kind != FdKind::uverbs_cmd) return;
    guarded([&] {
        uverbs_file_dup(oldfd, newfd);
        return 0;
    });
    fd_table_set(newfd, e);
}

int open_mode_arg(int flags, va_list ap)
{
    return (flags & O_CREAT) || (flags & O_TMPFILE) == O_TMPFILE ? va_arg(ap, int) : 0;
}

}  // namespace

extern "C" {

int socket(int domain, int type, int protocol)
{
    if (domain == AF_NETLINK && protocol == NETLINK_RDMA) {
        // Discovery is starting: register the provider first.  Then the
        // socket is answered in-process (rdma_netlink_socket.h), never by
        // the kernel's ib_core, whose devices are not ours; with
        // IWEMU_NETLINK=off it is refused and libibverbs/librdmacm fall back
        // to SYSFS_PATH (kernel-surface.md §1.1 item 2, §6.2 item 1).
        guarded([] {
            ensure_provider_loaded();
            return 0;
        });
        if (!rdma_netlink_enabled()) return fail(EPROTONOSUPPORT);
        return guarded([type] { return rdma_netlink_socket(type); });
    }
    return REAL(socket)(domain, type, protocol);
}

// The NETLINK_RDMA socket's calls (rdma_netlink_socket.h); every other
// socket goes straight to libc after one fd table read.
#define IS_RDMA_NETLINK(fd) (fd_table_get(fd).kind == FdKind::rdma_netlink)

int bind(int fd, const struct sockaddr* addr, socklen_t len)
{
    if (IS_RDMA_NETLINK(fd)) return guarded([&] { return rdma_netlink_bind(fd, addr, len); });
    return REAL(bind)(fd, addr, len);
}

int connect(int fd, const struct sockaddr* addr, socklen_t len)
{
    if (IS_RDMA_NETLINK(fd)) return 0;  // the only peer is the kernel
    return REAL(connect)(fd, addr, len);
}

int getsockname(int fd, struct sockaddr* addr, socklen_t* len)
{
    if (IS_RDMA_NETLINK(fd)) return guarded([&] { return rdma_netlink_getsockname(fd, addr, len); });
    return REAL(getsockname)(fd, addr, len);
}

int setsockopt(int fd, int level, int name, const void* value, socklen_t len)
{
    if (IS_RDMA_NETLINK(fd)) {
        bool handled = false;
        int r = rdma_netlink_setsockopt(fd, level, name, value, len, &handled);
        if (handled) return r;
    }
    return REAL(setsockopt)(fd, level, name, value, len);
}

int getsockopt(int fd, int level, int name, void* value, socklen_t* len)
{
    if (IS_RDMA_NETLINK(fd)) {
        bool handled = false;
        int r = rdma_netlink_getsockopt(fd, level, name, value, len, &handled);
        if (handled) return r;
    }
    return REAL(getsockopt)(fd, level, name, value, len);
}

ssize_t sendmsg(int fd, const struct msghdr* msg, int flags)
{
    if (IS_RDMA_NETLINK(fd)) return guarded([&]() -> ssize_t { return rdma_netlink_sendmsg(fd, msg); });
    return REAL(sendmsg)(fd, msg, flags);
}

ssize_t sendto(int fd, const void* buf, size_t len, int flags, const struct sockaddr* to, socklen_t to_len)
{
    if (IS_RDMA_NETLINK(fd)) {
        iovec iov{const_cast<void*>(buf), len};
        msghdr msg{const_cast<sockaddr*>(to), to ? to_len : 0, &iov, 1, nullptr, 0, 0};
        return guarded([&]() -> ssize_t { return rdma_netlink_sendmsg(fd, &msg); });
    }
    return REAL(sendto)(fd, buf, len, flags, to, to_len);
}

ssize_t send(int fd, const void* buf, size_t len, int flags)
{
    if (IS_RDMA_NETLINK(fd)) return sendto(fd, buf, len, flags, nullptr, 0);
    return REAL(send)(fd, buf, len, flags);
}

ssize_t recvmsg(int fd, struct msghdr* msg, int flags)
{
    if (IS_RDMA_NETLINK(fd)) return guarded([&]() -> ssize_t { return rdma_netlink_recvmsg(fd, msg, flags, REAL(recvmsg)); });
    return REAL(recvmsg)(fd, msg, flags);
}

ssize_t recvfrom(int fd, void* buf, size_t len, int flags, struct sockaddr* from, socklen_t* from_len)
{
    if (IS_RDMA_NETLINK(fd)) {
        iovec iov{buf, len};
        msghdr msg{from, from && from_len ? *from_len : 0, &iov, 1, nullptr, 0, 0};
        ssize_t n = guarded([&]() -> ssize_t { return rdma_netlink_recvmsg(fd, &msg, flags, REAL(recvmsg)); });
        if (n >= 0 && from && from_len) *from_len = msg.msg_namelen;
        return n;
    }
    return REAL(recvfrom)(fd, buf, len, flags, from, from_len);
}

ssize_t recv(int fd, void* buf, size_t len, int flags)
{
    if (IS_RDMA_NETLINK(fd)) return recvfrom(fd, buf, len, flags, nullptr, nullptr);
    return REAL(recv)(fd, buf, len, flags);
}

// A /sys/class/infiniband* path becomes the generated tree's (sysfs_redirect.h).
#define REDIRECT_SYSFS(path) \
    RedirectedPath redirected_; \
    path = sysfs_redirect(path, &redirected_)

#define OPEN_BODY(realname, ...)                      \
    int r = guarded([&] { return open_dev(path, flags); }); \
    if (r != -2) return r;                            \
    REDIRECT_SYSFS(path);                             \
    if (path && path[0] == '/') {                     \
        r = guarded([&] { return open_hw_counter(path, flags); }); \
        if (r != -2) return r;                        \
    }                                                 \
    return REAL(realname)(__VA_ARGS__)

int open(const char* path, int flags, ...)
{
    va_list ap;
    va_start(ap, flags);
    int mode = open_mode_arg(flags, ap);
    va_end(ap);
    OPEN_BODY(open, path, flags, mode);
}

int open64(const char* path, int flags, ...)
{
    va_list ap;
    va_start(ap, flags);
    int mode = open_mode_arg(flags, ap);
    va_end(ap);
    OPEN_BODY(open64, path, flags, mode);
}

int __open_2(const char* path, int flags) { OPEN_BODY(__open_2, path, flags); }
int __open64_2(const char* path, int flags) { OPEN_BODY(__open64_2, path, flags); }

int openat(int dirfd, const char* path, int flags, ...)
{
    va_list ap;
    va_start(ap, flags);
    int mode = open_mode_arg(flags, ap);
    va_end(ap);
    OPEN_BODY(openat, dirfd, path, flags, mode);
}

int openat64(int dirfd, const char* path, int flags, ...)
{
    va_list ap;
    va_start(ap, flags);
    int mode = open_mode_arg(flags, ap);
    va_end(ap);
    OPEN_BODY(openat64, dirfd, path, flags, mode);
}

int __openat_2(int dirfd, const char* path, int flags) { OPEN_BODY(__openat_2, dirfd, path, flags); }
int __openat64_2(int dirfd, const char* path, int flags) { OPEN_BODY(__openat64_2, dirfd, path, flags); }

#define STAT_BODY(realname, st, ...)                              \
    int r = guarded([&] { return stat_dev(path, reinterpret_cast<struct stat*>(st)); }); \
    if (r != -2) return r;                                        \
    REDIRECT_SYSFS(path);                                         \
    return REAL(realname)(__VA_ARGS__)

int stat(const char* path, struct stat* st) { STAT_BODY(stat, st, path, st); }
int stat64(const char* path, struct stat64* st) { STAT_BODY(stat64, st, path, st); }
int lstat(const char* path, struct stat* st) { STAT_BODY(lstat, st, path, st); }
int lstat64(const char* path, struct stat64* st) { STAT_BODY(lstat64, st, path, st); }
int fstatat(int dirfd, const char* path, struct stat* st, int flags)
{
    if (path[0] == '\0' && (flags & AT_EMPTY_PATH)) {
        int r = REAL(fstatat)(dirfd, path, st, flags);
        if (r == 0) fix_fstat(dirfd, st);
        return r;
    }
    STAT_BODY(fstatat, st, dirfd, path, st, flags);
}
int fstatat64(int dirfd, const char* path, struct stat64* st, int flags)
{
    if (path[0] == '\0' && (flags & AT_EMPTY_PATH)) {
        int r = REAL(fstatat64)(dirfd, path, st, flags);
        if (r == 0) fix_fstat(dirfd, reinterpret_cast<struct stat*>(st));
        return r;
    }
    STAT_BODY(fstatat64, st, dirfd, path, st, flags);
}
int __xstat(int ver, const char* path, struct stat* st) { STAT_BODY(__xstat, st, ver, path, st); }
int __lxstat(int ver, const char* path, struct stat* st) { STAT_BODY(__lxstat, st, ver, path, st); }
int __fxstatat(int ver, int dirfd, const char* path, struct stat* st, int flags)
{
    STAT_BODY(__fxstatat, st, ver, dirfd, path, st, flags);
}

int fstat(int fd, struct stat* st)
{
    int r = REAL(fstat)(fd, st);
    if (r == 0) fix_fstat(fd, st);
    return r;
}

int fstat64(int fd, struct stat64* st)
{
    int r = REAL(fstat64)(fd, st);
    if (r == 0) fix_fstat(fd, reinterpret_cast<struct stat*>(st));
    return r;
}

int __fxstat(int ver, int fd, struct stat* st)
{
    int r = REAL(__fxstat)(ver, fd, st);
    if (r == 0) fix_fstat(fd, st);
    return r;
}

// statx (ls, stat(1), newer runtimes): same answers in statx form.
int statx(int dirfd, const char* path, int flags, unsigned int mask, struct statx* stx)
{
    struct stat st;
    DevPath dev{};
    const bool by_fd = path[0] == '\0' && (flags & AT_EMPTY_PATH);
    if (by_fd) {
        FdEntry e = fd_table_get(dirfd);
        if (e.kind == FdKind::uverbs_cmd) dev = {DevNode::uverbs, e.device};
        if (e.kind == FdKind::ucma) dev = {DevNode::rdma_cm, 0};
    } else {
        dev = classify_guarded(path);
        if (dev.node == DevNode::rdma_cm && !has_ucma()) dev = {};
    }
    if (dev.node == DevNode::none) {
        REDIRECT_SYSFS(path);
        return REAL(statx)(dirfd, path, flags, mask, stx);
    }
    fill_dev_stat(dev, &st);
    std::memset(stx, 0, sizeof *stx);
    stx->stx_mask = STATX_BASIC_STATS;
    stx->stx_mode = static_cast<uint16_t>(st.st_mode);
    stx->stx_nlink = static_cast<uint32_t>(st.st_nlink);
    stx->stx_ino = st.st_ino;
    stx->stx_blksize = static_cast<uint32_t>(st.st_blksize);
    stx->stx_rdev_major = major(st.st_rdev);
    stx->stx_rdev_minor = minor(st.st_rdev);
    stx->stx_atime = {st.st_atim.tv_sec, static_cast<uint32_t>(st.st_atim.tv_nsec), 0};
    stx->stx_mtime = stx->stx_ctime = stx->stx_atime;
    return 0;
}

int access(const char* path, int mode)
{
    DevPath dev = classify_guarded(path);
    if (dev.node != DevNode::none && (dev.node != DevNode::rdma_cm || has_ucma())) return 0;
    REDIRECT_SYSFS(path);
    return REAL(access)(path, mode);
}

int faccessat(int dirfd, const char* path, int mode, int flags)
{
    DevPath dev = classify_guarded(path);
    if (dev.node != DevNode::none && (dev.node != DevNode::rdma_cm || has_ucma())) return 0;
    REDIRECT_SYSFS(path);
    return REAL(faccessat)(dirfd, path, mode, flags);
}

// glibc's opendir opens the directory internally, past open(): `ls`,
// Python's os.listdir and scripts list /sys/class/infiniband through it.
DIR* opendir(const char* path)
{
    REDIRECT_SYSFS(path);
    return REAL(opendir)(path);
}

// A shell's `cd /sys/class/infiniband` (infiniband-diags' ibstatus lists
// the devices with `cd` and `*`): the working directory becomes the
// generated tree's, where relative names then resolve on their own.
int chdir(const char* path)
{
    REDIRECT_SYSFS(path);
    return REAL(chdir)(path);
}

// The rest of what `ls -l`, `stat` and `find` ask of a path (SELinux label,
// ACLs, link targets).
ssize_t readlink(const char* path, char* buf, size_t len)
{
    REDIRECT_SYSFS(path);
    return REAL(readlink)(path, buf, len);
}
// realpath resolves inside glibc, past lstat/readlink: the answer names the
// generated tree, where the device's files really are.
char* realpath(const char* path, char* resolved)
{
    REDIRECT_SYSFS(path);
    return REAL(realpath)(path, resolved);
}
char* __realpath_chk(const char* path, char* resolved, size_t resolved_len)
{
    REDIRECT_SYSFS(path);
    return REAL(__realpath_chk)(path, resolved, resolved_len);
}
char* canonicalize_file_name(const char* path)
{
    REDIRECT_SYSFS(path);
    return REAL(canonicalize_file_name)(path);
}
ssize_t getxattr(const char* path, const char* name, void* value, size_t size)
{
    REDIRECT_SYSFS(path);
    return REAL(getxattr)(path, name, value, size);
}
ssize_t lgetxattr(const char* path, const char* name, void* value, size_t size)
{
    REDIRECT_SYSFS(path);
    return REAL(lgetxattr)(path, name, value, size);
}
ssize_t listxattr(const char* path, char* list, size_t size)
{
    REDIRECT_SYSFS(path);
    return REAL(listxattr)(path, list, size);
}
ssize_t llistxattr(const char* path, char* list, size_t size)
{
    REDIRECT_SYSFS(path);
    return REAL(llistxattr)(path, list, size);
}

ssize_t read(int fd, void* buf, size_t len)
{
    FdKind kind = fd_table_get(fd).kind;
    if (kind == FdKind::comp_channel)
        return guarded([&] { return comp_channel_read(fd, buf, len, REAL(read)); });
    if (kind == FdKind::rdma_netlink) return recv(fd, buf, len, 0);
    return REAL(read)(fd, buf, len);
}

ssize_t write(int fd, const void* buf, size_t len)
{
    FdEntry e = fd_table_get(fd);
    if (e.kind == FdKind::uverbs_cmd) return guarded([&] { return uverbs_write(fd, buf, len); });
    if (e.kind == FdKind::ucma && has_ucma()) return guarded([&] { return ucma_write(fd, buf, len); });
    if (e.kind == FdKind::rdma_netlink) return send(fd, buf, len, 0);
    return REAL(write)(fd, buf, len);
}

int ioctl(int fd, unsigned long request, ...)
{
    va_list ap;
    va_start(ap, request);
    void* arg = va_arg(ap, void*);
    va_end(ap);
    if (fd_table_get(fd).kind == FdKind::uverbs_cmd) return guarded([&] { return uverbs_ioctl(fd, request, arg); });
    return REAL(ioctl)(fd, request, arg);
}

int close(int fd)
{
    if (is_shim_fd(fd)) release_guarded(fd);
    return REAL(close)(fd);
}

int dup(int fd)
{
    int r = REAL(dup)(fd);
    if (r >= 0 && is_shim_fd(fd)) copy_fd(fd, r);
    return r;
}

int dup2(int oldfd, int newfd)
{
    if (oldfd != newfd && is_shim_fd(newfd)) release_guarded(newfd);
    int r = REAL(dup2)(oldfd, newfd);
    if (r >= 0 && is_shim_fd(oldfd)) copy_fd(oldfd, r);
    return r;
}

int dup3(int oldfd, int newfd, int flags)
{
    if (oldfd != newfd && is_shim_fd(newfd)) release_guarded(newfd);
    int r = REAL(dup3)(oldfd, newfd, flags);
    if (r >= 0 && is_shim_fd(oldfd)) copy_fd(oldfd, r);
    return r;
}

// fcntl's F_DUPFD / F_DUPFD_CLOEXEC are dup too (Python's os.dup uses the
// latter).  The third argument is an int or a pointer: passed on as the
// word it arrived in.
#define FCNTL_BODY(realname)                                             \
    va_list ap;                                                          \
    va_start(ap, cmd);                                                   \
    void* arg = va_arg(ap, void*);                                       \
    va_end(ap);                                                          \
    int r = REAL(realname)(fd, cmd, arg);                                \
    if (r >= 0 && (cmd == F_DUPFD || cmd == F_DUPFD_CLOEXEC) && is_shim_fd(fd)) copy_fd(fd, r); \
    return r

int fcntl(int fd, int cmd, ...) { FCNTL_BODY(fcntl); }
int fcntl64(int fd, int cmd, ...) { FCNTL_BODY(fcntl64); }

}  // extern "C"
