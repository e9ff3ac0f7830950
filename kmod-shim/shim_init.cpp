// Load-time set-up of libiwemu-shim.so.  iwemu-run prepares the environment
// (SYSFS_PATH, IWEMU_PROVIDER); when the shim is preloaded by hand without
// SYSFS_PATH, it generates the default sysfs tree itself so discovery still
// works.  It also lifts the soft open-files limit to the hard one (below).
// Nothing else happens here: no threads, no sockets (the preload reaches
// every child process, and qperf forks before it opens a device).
#include <sys/resource.h>

#include <cstdio>
#include <cstdlib>

#include "emulator/config.h"
#include "emulator/port_netdev.h"
#include "kmod-shim/sysfs_tree.h"

namespace {

// Every connected QP costs the emulator one TCP socket, an fd the
// application never opened: with kernel siw a QP costs none.  The usual soft
// limit (1024) would stop an application near 1,000 QPs where siw goes on,
// so the process gets its hard limit, as systemd grants services.
void raise_open_files_limit()
{
    rlimit lim{};
    if (getrlimit(RLIMIT_NOFILE, &lim) == 0 && lim.rlim_cur < lim.rlim_max) {
        lim.rlim_cur = lim.rlim_max;
        setrlimit(RLIMIT_NOFILE, &lim);
    }
}

__attribute__((constructor)) void iwemu_shim_init()
{
    raise_open_files_limit();
    const char* sysfs = std::getenv("SYSFS_PATH");
    if (sysfs && *sysfs) return;
    std::string error;
    std::string root = iwemu::shim::default_sysfs_root(&error);
    if (root.empty() || !(error = iwemu::shim::sysfs_tree_sync(root, iwemu::shim::configured_devices(iwemu::load_config()))).empty()) {
        std::fprintf(stderr, "iwemu: cannot prepare the sysfs tree: %s\n", error.c_str());
        return;
    }
    setenv("SYSFS_PATH", root.c_str(), 1);
}

}  // namespace
