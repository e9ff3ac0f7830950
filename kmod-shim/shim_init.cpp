// Load-time set-up of libiwemu-shim.so.  iwemu-run prepares the environment
// (SYSFS_PATH, IWEMU_PROVIDER); when the shim is preloaded by hand without
// SYSFS_PATH, it generates the default sysfs tree itself so discovery still
// works.  Nothing else happens here: no threads, no sockets (the preload
// reaches every child process, and qperf forks before it opens a device).
#include <cstdio>
#include <cstdlib>

#include "kmod-shim/sysfs_tree.h"

namespace {

__attribute__((constructor)) void iwemu_shim_init()
{
    const char* sysfs = std::getenv("SYSFS_PATH");
    if (sysfs && *sysfs) return;
    std::string error;
    std::string root = iwemu::shim::default_sysfs_root(&error);
    if (root.empty() || !(error = iwemu::shim::sysfs_tree_sync(root, iwemu::shim::default_devices())).empty()) {
        std::fprintf(stderr, "iwemu: cannot prepare the sysfs tree: %s\n", error.c_str());
        return;
    }
    setenv("SYSFS_PATH", root.c_str(), 1);
}

}  // namespace
