#include "kmod-shim/hw_counter_files.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <string>
#include <string_view>

#include "kmod-shim/nldev_backend.h"

namespace iwemu::shim {

int open_hw_counter(const char* path, int flags)
{
    const char* root = std::getenv("SYSFS_PATH");
    if (!path || !root || root[0] != '/') return -2;
    // Every open() of the process passes here: no allocation until the path matches.
    std::string_view p(path);
    const std::string_view r(root);
    constexpr std::string_view cls = "/class/infiniband/";
    if (p.substr(0, r.size()) != r) return -2;
    p.remove_prefix(r.size());
    if (p.substr(0, cls.size()) != cls) return -2;
    p.remove_prefix(cls.size());
    const size_t slash = p.find('/');
    if (slash == std::string_view::npos) return -2;
    const std::string_view dev = p.substr(0, slash);
    constexpr std::string_view mid = "/ports/1/hw_counters/";
    p.remove_prefix(slash);
    if (p.substr(0, mid.size()) != mid) return -2;
    const std::string_view name = p.substr(mid.size());
    if (name.empty() || name.find('/') != std::string_view::npos) return -2;
    if ((flags & O_ACCMODE) != O_RDONLY) return -2;  // the real file's mode (0444) refuses it
    NldevBackend& backend = shim_nldev_backend();
    for (const NldevDevice& d : backend.devices()) {
        if (d.name != dev) continue;
        const ResourceSnapshot s = shim_resources(d.index, name == "tcp_retransmits");
        for (const auto& [n, value] : hw_counter_list(s.port)) {
            if (n != name) continue;
            const int fd = memfd_create("hw_counter", (flags & O_CLOEXEC) ? MFD_CLOEXEC : 0);
            if (fd < 0) return -1;
            const std::string text = std::to_string(value) + "\n";
            if (write(fd, text.data(), text.size()) != static_cast<ssize_t>(text.size()) || lseek(fd, 0, SEEK_SET) != 0) {
                const int e = errno;
                close(fd);
                errno = e ? e : EIO;
                return -1;
            }
            return fd;
        }
        return -2;
    }
    return -2;
}

}  // namespace iwemu::shim
