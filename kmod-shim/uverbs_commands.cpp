#include "kmod-shim/uverbs_commands.h"

#include <cerrno>
#include <cstdint>
#include <cstring>
#include <sys/uio.h>
#include <unistd.h>

#include "kmod-shim/comp_channel.h"
#include "kmod-shim/uverbs_file.h"

namespace iwemu::shim {
namespace {

// struct ib_uverbs_cmd_hdr (include/uapi/rdma/ib_user_verbs.h)
struct CmdHdr {
    uint32_t command;
    uint16_t in_words;   // whole request, header included, in 4-byte words
    uint16_t out_words;  // response, in 4-byte words
};
static_assert(sizeof(CmdHdr) == 8);

constexpr uint32_t kCmdCreateCompChannel = 17;  // IB_USER_VERBS_CMD_CREATE_COMP_CHANNEL
constexpr uint32_t kCmdFlagExtended = 0x80000000u;

struct CreateCompChannel {
    CmdHdr hdr;
    uint64_t response;  // user pointer to struct { u32 fd; }
};
static_assert(sizeof(CreateCompChannel) == 16);

// The kernel's copy_to_user: a bad response pointer is EFAULT, not a crash
// of the caller inside write().  process_vm_writev on ourselves checks the
// destination; where it is unavailable (seccomp), fall back to a plain copy.
bool copy_to_user(uint64_t user_ptr, const void* src, size_t n)
{
    iovec local{const_cast<void*>(src), n};
    iovec remote{reinterpret_cast<void*>(user_ptr), n};
    ssize_t done = process_vm_writev(getpid(), &local, 1, &remote, 1, 0);
    if (done == static_cast<ssize_t>(n)) return true;
    if (done < 0 && (errno == ENOSYS || errno == EPERM)) {
        std::memcpy(reinterpret_cast<void*>(user_ptr), src, n);
        return true;
    }
    return false;
}

bool copy_from_user(void* dst, uint64_t user_ptr, size_t n)
{
    iovec local{dst, n};
    iovec remote{reinterpret_cast<void*>(user_ptr), n};
    ssize_t done = process_vm_readv(getpid(), &local, 1, &remote, 1, 0);
    if (done == static_cast<ssize_t>(n)) return true;
    if (done < 0 && (errno == ENOSYS || errno == EPERM)) {
        std::memcpy(dst, reinterpret_cast<const void*>(user_ptr), n);
        return true;
    }
    return false;
}

// RDMA_VERBS_IOCTL (include/uapi/rdma/rdma_user_ioctl_cmds.h):
// _IOWR(0x1b, 1, struct ib_uverbs_ioctl_hdr).
struct IoctlHdr {
    uint16_t length;  // header and attributes, octets
    uint16_t object_id;
    uint16_t method_id;
    uint16_t num_attrs;
    uint64_t reserved1;
    uint32_t driver_id;
    uint32_t reserved2;
};
static_assert(sizeof(IoctlHdr) == 24);
struct IoctlAttr {  // struct ib_uverbs_attr
    uint16_t attr_id;
    uint16_t len;
    uint16_t flags;
    uint16_t attr_data;
    uint64_t data;
};
static_assert(sizeof(IoctlAttr) == 16);
constexpr unsigned long kRdmaVerbsIoctl = 0xc0181b01;  // _IOWR(RDMA_IOCTL_MAGIC, 1, 24 octets)
constexpr uint16_t kObjectAsyncEvent = 16;             // UVERBS_OBJECT_ASYNC_EVENT
constexpr uint16_t kMethodAsyncEventAlloc = 0;         // UVERBS_METHOD_ASYNC_EVENT_ALLOC
constexpr uint16_t kAttrAsyncEventAllocFd = 0;         // UVERBS_ATTR_ASYNC_EVENT_ALLOC_FD_HANDLE
constexpr uint16_t kAttrValidOutput = 1u << 1;         // UVERBS_ATTR_F_VALID_OUTPUT

ssize_t create_comp_channel(const void* buf, size_t len)
{
    CreateCompChannel cmd;
    std::memcpy(&cmd, buf, sizeof cmd);
    if (cmd.hdr.out_words * 4u < sizeof(uint32_t) || cmd.response == 0) {
        errno = ENOSPC;
        return -1;
    }
    int fd = comp_channel_create();
    if (fd < 0) return -1;
    uint32_t resp = static_cast<uint32_t>(fd);
    if (!copy_to_user(cmd.response, &resp, sizeof resp)) {
        comp_channel_close(fd);
        close(fd);
        errno = EFAULT;
        return -1;
    }
    return static_cast<ssize_t>(len);
}

}  // namespace

ssize_t uverbs_write(int fd, const void* buf, size_t len)
{
    CmdHdr hdr;
    if (len < sizeof hdr || buf == nullptr) {
        errno = EINVAL;
        return -1;
    }
    std::memcpy(&hdr, buf, sizeof hdr);
    if (hdr.command & kCmdFlagExtended) {
        errno = EOPNOTSUPP;
        return -1;
    }
    if (hdr.in_words * 4u != len) {
        errno = EINVAL;
        return -1;
    }
    switch (hdr.command) {
    case kCmdCreateCompChannel:
        if (len < sizeof(CreateCompChannel)) {
            errno = EINVAL;
            return -1;
        }
        return create_comp_channel(buf, len);
    default:
        // Objects are created through the provider, never through the
        // "kernel"; a command reaching here came from a foreign provider.
        errno = EOPNOTSUPP;
        return -1;
    }
}

int uverbs_ioctl(int fd, unsigned long request, void* arg)
{
    // Only the async event file of an imported context is answered (see
    // uverbs_commands.h); everything else is the ENOTTY of a kernel
    // without the ioctl interface.
    IoctlHdr hdr;
    if (request != kRdmaVerbsIoctl || !arg || !copy_from_user(&hdr, reinterpret_cast<uintptr_t>(arg), sizeof hdr) ||
        hdr.object_id != kObjectAsyncEvent || hdr.method_id != kMethodAsyncEventAlloc || hdr.num_attrs != 1 ||
        hdr.length != sizeof hdr + sizeof(IoctlAttr)) {
        errno = ENOTTY;
        return -1;
    }
    const uint64_t attr_at = reinterpret_cast<uintptr_t>(arg) + sizeof hdr;
    IoctlAttr attr;
    if (!copy_from_user(&attr, attr_at, sizeof attr)) {
        errno = EFAULT;
        return -1;
    }
    if (attr.attr_id != kAttrAsyncEventAllocFd) {
        errno = ENOTTY;
        return -1;
    }
    const int async_fd = uverbs_file_take_async_fd(fd);
    if (async_fd < 0) {
        errno = ENOTTY;  // no provider asked for one: as before
        return -1;
    }
    attr.data = static_cast<uint64_t>(async_fd);
    attr.flags |= kAttrValidOutput;
    if (!copy_to_user(attr_at, &attr, sizeof attr)) {
        errno = EFAULT;  // the offered fd stays the context's (the provider closes it)
        return -1;
    }
    return 0;
}

}  // namespace iwemu::shim
