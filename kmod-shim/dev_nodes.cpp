#include "kmod-shim/dev_nodes.h"

#include "kmod-shim/sysfs_tree.h"

#include <fcntl.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <ctime>
#include <string>

namespace iwemu::shim {
namespace {

constexpr char kDevDir[] = "/dev/infiniband";

bool uverbs_listed(int index)
{
    const char* root = std::getenv("SYSFS_PATH");
    std::string path = std::string(root && *root ? root : "/sys") + "/class/infiniband_verbs/uverbs" +
                       std::to_string(index) + "/ibdev";
    return faccessat(AT_FDCWD, path.c_str(), R_OK, 0) == 0;
}

}  // namespace

DevPath classify_dev_path(const char* path)
{
    if (!path || std::strncmp(path, kDevDir, sizeof kDevDir - 1) != 0) return {};
    const char* rest = path + sizeof kDevDir - 1;
    if (*rest == '\0' || (rest[0] == '/' && rest[1] == '\0')) return {DevNode::dir, 0};
    if (*rest != '/') return {};
    ++rest;
    if (std::strcmp(rest, "rdma_cm") == 0) return {DevNode::rdma_cm, 0};
    if (std::strncmp(rest, "uverbs", 6) == 0 && rest[6] >= '0' && rest[6] <= '9') {
        char* end = nullptr;
        long index = std::strtol(rest + 6, &end, 10);
        if (*end == '\0' && index < 256 && uverbs_listed(static_cast<int>(index)))
            return {DevNode::uverbs, static_cast<int>(index)};
    }
    return {};
}

void fill_dev_stat(DevPath dev, struct stat* st)
{
    std::memset(st, 0, sizeof *st);
    st->st_nlink = 1;
    st->st_blksize = 4096;
    st->st_ino = 0x1b00 + static_cast<unsigned>(dev.index) + (dev.node == DevNode::rdma_cm ? 0x100 : 0);
    switch (dev.node) {
    case DevNode::dir:
        st->st_mode = S_IFDIR | 0755;
        st->st_nlink = 2;
        break;
    case DevNode::uverbs:
        st->st_mode = S_IFCHR | 0666;
        st->st_rdev = makedev(kUverbsMajor, kUverbsFirstMinor + dev.index);
        break;
    case DevNode::rdma_cm:
        st->st_mode = S_IFCHR | 0666;
        st->st_rdev = makedev(10, 58);
        break;
    case DevNode::none:
        break;
    }
    timespec now{};
    clock_gettime(CLOCK_REALTIME, &now);
    st->st_atim = st->st_mtim = st->st_ctim = now;
}

}  // namespace iwemu::shim
