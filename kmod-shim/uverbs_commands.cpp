#include "kmod-shim/uverbs_commands.h"

#include <cerrno>
#include <cstdint>
#include <cstring>
#include <sys/uio.h>
#include <unistd.h>

#include "kmod-shim/comp_channel.h"

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

int uverbs_ioctl(int, unsigned long)
{
    errno = ENOTTY;
    return -1;
}

}  // namespace iwemu::shim
