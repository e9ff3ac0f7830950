// What the shim's RDMA netlink answers say (nldev_commands.h): the devices
// of the configuration (sysfs_tree.h), this process's verbs objects through
// the emulator's snapshot (emulator/resource_snapshot.h), its rdma_cm ids,
// and `rdma link add/delete` through the configuration file (rdma_links.h).
// QPs and counters of the user's other iwemu processes come from their
// status segments (emulator/status/status_reader.h): one view, as a kernel
// RNIC shared by all processes gives.
#pragma once

#include "kmod-shim/nldev_commands.h"

namespace iwemu::shim {

NldevBackend& shim_nldev_backend();

// Device `index`'s objects: this process's (emulator snapshot) and the QPs
// of the user's other iwemu processes; port counters summed over all.
// tcp_info: also look up each connection's TCP retransmits (sock_diag).
ResourceSnapshot shim_resources(uint32_t index, bool tcp_info);

}  // namespace iwemu::shim
