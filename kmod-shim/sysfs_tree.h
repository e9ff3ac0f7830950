// The sysfs tree libibverbs and librdmacm read instead of /sys when the
// kernel has no RDMA (kernel-surface.md §1.2, §7.4).  It is a real directory
// tree, pointed to by SYSFS_PATH, because glibc's opendir/readdir cannot be
// interposed.  Generation is idempotent: a file is rewritten only when its
// content changes and directories are never recreated, so the ibdev
// directory's mtime (libibverbs' device identity across re-scans) is stable.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <vector>

namespace iwemu {
struct Config;
}

namespace iwemu::shim {

using Gid = std::array<uint8_t, 16>;

struct SysfsDevice {
    std::string ibdev;       // "iwemu0"
    uint64_t node_guid = 0;  // host order; written as 4 big-endian 16-bit groups
    std::vector<Gid> gids;   // port 1 GID table, index order
    std::vector<std::string> gid_netdevs;  // per GID: its interface (ports/1/gid_attrs/ndevs/<i>)
    std::string netdev;      // device/net/<netdev>, as siw's device shows its interface ("": none)
};

inline constexpr int kUverbsAbiVersion = 6;      // class/infiniband_verbs/abi_version
inline constexpr int kDeviceAbiVersion = 1;      // per-uverbs abi_version, in the provider's range
inline constexpr int kUcmaAbiVersion = 4;        // class/misc/rdma_cm/abi_version
inline constexpr unsigned kUverbsMajor = 231;     // /dev/infiniband/uverbsN is 231:(192+N), as ib_uverbs has it
inline constexpr unsigned kUverbsFirstMinor = 192;
inline constexpr uint64_t kNodeGuidBase = 0x0269'7765'6d75'0000ull;  // 02 "iwemu" 00 <index>
inline constexpr size_t kMaxGids = 16;

// The default configuration: one device iwemu0 reachable on every local
// address; one GID per local address of an interface that is up: IPv4
// addresses as IPv4-mapped GIDs (::ffff:a.b.c.d) first, then IPv6
// addresses, loopback addresses last.
// netdev: the interface port 1 follows (emulator/port_netdev.h).
std::vector<SysfsDevice> default_devices(const std::string& netdev);

// iwemu0 (default_devices with the configured port interface), then one
// device per `rdma_link = NAME NETDEV` of the configuration (added by `rdma
// link add`): GIDs of that interface's addresses only, node GUID by position.
std::vector<SysfsDevice> configured_devices(const Config& config);

// $XDG_RUNTIME_DIR/iwemu/sysfs-net<N> when that directory is ours and
// writable, else /tmp/iwemu-<uid>/sysfs-net<N> (created 0700, ownership
// verified); N is the network namespace's inode, one tree per namespace.  Returns ""
// and sets *error when no safe location exists.
std::string default_sysfs_root(std::string* error);

// Creates or refreshes the tree under root.  Returns "" on success, else a
// message naming the path that failed.
std::string sysfs_tree_sync(const std::string& root, const std::vector<SysfsDevice>& devices);

// "xxxx:xxxx:xxxx:xxxx" as in sysfs node_guid.
std::string format_node_guid(uint64_t guid);
// "xxxx:xxxx:...:xxxx" (8 groups of 4 hex digits) as in sysfs gids/<i>.
std::string format_gid(const Gid& gid);

}  // namespace iwemu::shim
