#include "kmod-shim/sysfs_redirect.h"

#include <cstdlib>
#include <cstring>

namespace iwemu::shim {
namespace {

constexpr char kPrefix[] = "/sys/class/infiniband";
constexpr size_t kPrefixLen = sizeof kPrefix - 1;

// What follows "/sys/class/infiniband": end of path, "/..." or "_verbs[/...]".
bool is_rdma_class_path(const char* path)
{
    if (std::strncmp(path, kPrefix, kPrefixLen) != 0) return false;
    const char* rest = path + kPrefixLen;
    if (std::strncmp(rest, "_verbs", 6) == 0) rest += 6;
    return *rest == '\0' || *rest == '/';
}

}  // namespace

const char* sysfs_redirect(const char* path, RedirectedPath* out) noexcept
{
    if (!path || !is_rdma_class_path(path)) return path;
    const char* root = std::getenv("SYSFS_PATH");
    if (!root || root[0] != '/' || std::strcmp(root, "/sys") == 0) return path;
    const char* rest = path + 4;  // "/class/infiniband..."
    const size_t root_len = std::strlen(root);
    const size_t rest_len = std::strlen(rest);
    if (root_len + rest_len + 1 > sizeof out->path) return path;
    std::memcpy(out->path, root, root_len);
    std::memcpy(out->path + root_len, rest, rest_len + 1);
    return out->path;
}

}  // namespace iwemu::shim
