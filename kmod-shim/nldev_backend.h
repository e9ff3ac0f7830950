// What the shim's RDMA netlink answers say (nldev_commands.h): the devices
// of the configuration (sysfs_tree.h), this process's verbs objects through
// the emulator's snapshot (emulator/resource_snapshot.h), its rdma_cm ids,
// and `rdma link add/delete` through the configuration file (rdma_links.h).
// Objects of other processes are not visible (each process is its own RNIC).
#pragma once

#include "kmod-shim/nldev_commands.h"

namespace iwemu::shim {

NldevBackend& shim_nldev_backend();

}  // namespace iwemu::shim
