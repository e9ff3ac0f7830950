// /sys paths of RDMA devices, as programs spell them, redirected into the
// generated tree (SYSFS_PATH).  libibverbs and librdmacm honour SYSFS_PATH
// themselves; scripts, `ls`, rdma-core's tests and tools read the real
// /sys/class/infiniband* paths, so the shim's path calls rewrite those.
// Nothing else under /sys changes, and the real /sys is never written.
#pragma once

#include <cstddef>

namespace iwemu::shim {

struct RedirectedPath {
    char path[4096];
};

// The path to use instead of `path`: out->path when `path` is
// /sys/class/infiniband[...] or /sys/class/infiniband_verbs[...] and a
// generated tree is in use, else `path` itself (also when the result would
// not fit: the real path then fails as it would without iwemu).
const char* sysfs_redirect(const char* path, RedirectedPath* out) noexcept;

}  // namespace iwemu::shim
