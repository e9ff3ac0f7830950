// Which network interface port 1 follows (port_monitor.h), also what the
// sysfs tree shows as the device's net/<ifname> (kmod-shim/sysfs_tree.h):
// the one the `netdev` setting names, else the first non-loopback
// interface that is up and running, else the loopback interface.
#pragma once

#include <array>
#include <cstdint>
#include <optional>
#include <string>

namespace iwemu {

// The interface chosen at start and its state then.  ifindex 0: none
// (`name` does not exist: the port is DOWN; getifaddrs failed: ACTIVE).
struct PortNetdev {
    int ifindex = 0;
    std::string name;
    bool up = false;
    std::optional<std::array<uint8_t, 6>> mac;
};
// name: the configured interface, empty for the automatic choice.
PortNetdev choose_port_netdev(const std::string& name);

}  // namespace iwemu
