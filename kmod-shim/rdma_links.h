// The devices `rdma link add` creates live in the user's configuration file
// (emulator/config.h: `rdma_link = NAME NETDEV` lines), so every later
// iwemu process sees them in its sysfs tree, netlink and libibverbs.
#pragma once

#include <string>

namespace iwemu::shim {

// Appends / removes the `rdma_link` line of NAME in user_config_path()
// (created if missing), rewriting the file atomically; other lines and
// comments stay as they are.  "" on success, else what failed.
std::string rdma_link_store(const std::string& name, const std::string& netdev);
std::string rdma_link_forget(const std::string& name);

// Regenerates the process's sysfs tree ($SYSFS_PATH) from the configuration.
std::string rdma_links_sync_tree();

}  // namespace iwemu::shim
