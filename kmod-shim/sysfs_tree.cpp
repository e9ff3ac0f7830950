#include "kmod-shim/sysfs_tree.h"
#include "emulator/status/status_reader.h"

#include "emulator/config.h"
#include "emulator/device.h"
#include "emulator/port_netdev.h"
#include <ftw.h>

#include <arpa/inet.h>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <dirent.h>
#include <fcntl.h>
#include <ifaddrs.h>
#include <net/if.h>
#include <netinet/in.h>
#include <sys/stat.h>
#include <unistd.h>

namespace iwemu::shim {
namespace {

std::string errno_text(const std::string& what, const std::string& path)
{
    return what + " " + path + ": " + std::strerror(errno);
}

// A directory we may write into: ours, a real directory (not a symlink
// planted by someone else in /tmp), not group/world writable.
bool is_private_dir(const std::string& path)
{
    struct stat st {};
    if (lstat(path.c_str(), &st) != 0) return false;
    return S_ISDIR(st.st_mode) && st.st_uid == getuid() && (st.st_mode & 022) == 0;
}

bool make_dir(const std::string& path, mode_t mode, std::string* error)
{
    if (mkdir(path.c_str(), mode) == 0 || errno == EEXIST) return true;
    *error = errno_text("cannot create directory", path);
    return false;
}

std::string read_small_file(const std::string& path)
{
    std::string out;
    int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) return out;
    char buf[256];
    ssize_t n;
    while ((n = read(fd, buf, sizeof buf)) > 0) out.append(buf, static_cast<size_t>(n));
    close(fd);
    return out;
}

// Writes only when the content differs, through a temporary file and
// rename() so concurrent generators and readers never see a partial value.
bool sync_file(const std::string& path, const std::string& content, std::string* error)
{
    if (read_small_file(path) == content) return true;
    std::string tmp = path + ".tmp." + std::to_string(getpid());
    int fd = open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0) {
        *error = errno_text("cannot create", tmp);
        return false;
    }
    bool ok = write(fd, content.data(), content.size()) == static_cast<ssize_t>(content.size());
    ok = (close(fd) == 0) && ok;
    if (!ok || rename(tmp.c_str(), path.c_str()) != 0) {
        *error = errno_text("cannot write", path);
        unlink(tmp.c_str());
        return false;
    }
    return true;
}

// Removes the empty directories in dir other than `keep` (an interface
// chosen before).
void prune_dirs_but(const std::string& dir, const std::string& keep)
{
    DIR* d = opendir(dir.c_str());
    if (!d) return;
    while (dirent* e = readdir(d)) {
        if (e->d_name[0] == '.' || keep == e->d_name) continue;
        unlinkat(dirfd(d), e->d_name, AT_REMOVEDIR);
    }
    closedir(d);
}

// Removes numbered entries >= keep (a GID table that shrank).
void prune_numbered(const std::string& dir, size_t keep)
{
    DIR* d = opendir(dir.c_str());
    if (!d) return;
    while (dirent* e = readdir(d)) {
        char* end = nullptr;
        unsigned long idx = std::strtoul(e->d_name, &end, 10);
        if (end != e->d_name && *end == '\0' && idx >= keep) unlinkat(dirfd(d), e->d_name, 0);
    }
    closedir(d);
}

Gid ipv4_mapped_gid(in_addr addr)
{
    Gid gid{};
    gid[10] = 0xff;
    gid[11] = 0xff;
    std::memcpy(&gid[12], &addr.s_addr, 4);
    return gid;
}

}  // namespace

std::string format_node_guid(uint64_t guid)
{
    char buf[24];
    std::snprintf(buf, sizeof buf, "%04x:%04x:%04x:%04x", unsigned(guid >> 48) & 0xffff,
                  unsigned(guid >> 32) & 0xffff, unsigned(guid >> 16) & 0xffff, unsigned(guid) & 0xffff);
    return buf;
}

std::string format_gid(const Gid& gid)
{
    std::string out;
    char group[8];
    for (size_t i = 0; i < 16; i += 2) {
        std::snprintf(group, sizeof group, "%s%02x%02x", i ? ":" : "", gid[i], gid[i + 1]);
        out += group;
    }
    return out;
}

namespace {

// GIDs of the addresses of interfaces that are up (only_netdev: of that
// interface alone).  Order: IPv4 non-loopback (GID 0 is what perftest and
// ibv_devinfo show first), IPv6 non-loopback, then loopback addresses.
void collect_gids(SysfsDevice& dev, const std::string& only_netdev)
{
    struct Entry {
        Gid gid;
        std::string netdev;
    };
    std::vector<Entry> v4, v6, loopback;
    ifaddrs* list = nullptr;
    if (getifaddrs(&list) == 0) {
        for (ifaddrs* ifa = list; ifa; ifa = ifa->ifa_next) {
            if (!ifa->ifa_addr || !(ifa->ifa_flags & IFF_UP)) continue;
            if (!only_netdev.empty() && (!ifa->ifa_name || only_netdev != ifa->ifa_name)) continue;
            Gid gid{};
            if (ifa->ifa_addr->sa_family == AF_INET)
                gid = ipv4_mapped_gid(reinterpret_cast<sockaddr_in*>(ifa->ifa_addr)->sin_addr);
            else if (ifa->ifa_addr->sa_family == AF_INET6)
                std::memcpy(gid.data(), &reinterpret_cast<sockaddr_in6*>(ifa->ifa_addr)->sin6_addr, 16);
            else
                continue;
            Entry e{gid, ifa->ifa_name ? ifa->ifa_name : ""};
            if (ifa->ifa_flags & IFF_LOOPBACK)
                loopback.push_back(std::move(e));
            else
                (ifa->ifa_addr->sa_family == AF_INET ? v4 : v6).push_back(std::move(e));
        }
        freeifaddrs(list);
    }
    for (const auto* group : {&v4, &v6, &loopback})
        for (const Entry& e : *group)
            if (dev.gids.size() < kMaxGids) {
                dev.gids.push_back(e.gid);
                dev.gid_netdevs.push_back(e.netdev);
            }
}

}  // namespace

std::vector<SysfsDevice> default_devices(const std::string& netdev)
{
    SysfsDevice dev;
    dev.ibdev = "iwemu0";
    dev.netdev = netdev;
    dev.node_guid = kNodeGuidBase | 1;
    collect_gids(dev, "");
    if (dev.gids.empty()) {  // no IPv4 at all (isolated namespace): still a usable GID 0
        in_addr lo{htonl(INADDR_LOOPBACK)};
        dev.gids.push_back(ipv4_mapped_gid(lo));
        dev.gid_netdevs.push_back("lo");
    }
    return {dev};
}

std::vector<SysfsDevice> configured_devices(const Config& config)
{
    std::vector<SysfsDevice> devices = default_devices(choose_port_netdev(config.netdev).name);
    for (const auto& [name, netdev] : config.rdma_links) {
        bool taken = false;
        for (const SysfsDevice& d : devices) taken |= d.ibdev == name;
        if (taken) continue;  // a hand-edited duplicate: the first one stands
        SysfsDevice dev;
        dev.ibdev = name;
        dev.netdev = netdev;
        dev.node_guid = kNodeGuidBase | (devices.size() + 1);
        collect_gids(dev, netdev);  // an interface without addresses: an empty GID table, as siw's
        devices.push_back(std::move(dev));
    }
    return devices;
}

namespace {

// The rest of what ib_core shows of a device and its port (ibstat and
// scripts read them), from the emulator's defaults: port 1 is up at 4X EDR.
std::string sync_attributes(const std::string& ibdev, const SysfsDevice& dev)
{
    const PortAttributes port_defaults;
    static_assert(PortAttributes{}.active_width == 2 && PortAttributes{}.active_speed == 32, "rate below says 4X EDR");
    std::string err;
    const std::string port = ibdev + "/ports/1";
    char cap_mask[16];
    std::snprintf(cap_mask, sizeof cap_mask, "0x%08x", port_defaults.port_cap_flags);
    const std::pair<std::string, std::string> files[] = {
        {ibdev + "/node_desc", node_description},
        {ibdev + "/fw_ver", firmware_version},
        {ibdev + "/sys_image_guid", format_node_guid(dev.node_guid)},
        {port + "/state", port_defaults.state == 4 ? "4: ACTIVE" : "1: DOWN"},
        {port + "/phys_state", port_defaults.phys_state == 5 ? "5: LinkUp" : "3: Disabled"},
        {port + "/rate", "100 Gb/sec (4X EDR)"},  // active_width 4X, active_speed EDR
        {port + "/link_layer", "Ethernet"},
        {port + "/lid", "0x0"},
        {port + "/sm_lid", "0x0"},
        {port + "/lid_mask_count", "0"},
        {port + "/sm_sl", "0"},
        {port + "/cap_mask", cap_mask},
    };
    for (const auto& [path, value] : files)
        if (!sync_file(path, value + "\n", &err)) return err;
    return "";
}

// The GID table lists this network namespace's addresses: two namespaces
// (two "hosts" joined by veth) need two trees, else the last launch writes
// its GIDs for both and a modify_qp connect leaves from an address the
// other namespace does not have (EADDRNOTAVAIL).  The namespace's inode
// names it for as long as any process lives in it.
//
// A configuration file of its own (IWEMU_CONFIG) may list other devices
// (`rdma_link`): it gets a tree of its own too, or processes of the two
// configurations would each sync the shared tree to their own devices and
// undo the other's.
std::string per_namespace_leaf()
{
    std::string leaf = "sysfs";
    struct stat st {};
    if (stat("/proc/self/ns/net", &st) == 0)  // no procfs: one namespace is all we can tell
        leaf += "-net" + std::to_string(static_cast<unsigned long long>(st.st_ino));
    if (const char* conf = std::getenv("IWEMU_CONFIG"); conf && *conf) {
        uint64_t h = 0xcbf29ce484222325ull;  // FNV-1a of the path as given
        for (const char* c = conf; *c; ++c) h = (h ^ static_cast<unsigned char>(*c)) * 0x100000001b3ull;
        char hex[17];
        std::snprintf(hex, sizeof hex, "%016llx", static_cast<unsigned long long>(h));
        leaf += std::string("-conf") + hex;
    }
    return leaf;
}

int remove_entry(const char* path, const struct stat*, int, FTW*) { return remove(path); }

void remove_tree(const std::string& path) { nftw(path.c_str(), remove_entry, 16, FTW_DEPTH | FTW_PHYS); }

// A device `rdma link delete` removed leaves the tree: its uverbsN (the
// highest numbers, devices are numbered in order) and its class directory.
void prune_removed_devices(const std::string& verbs, const std::string& ib, const std::vector<SysfsDevice>& devices)
{
    if (DIR* d = opendir(verbs.c_str())) {
        std::vector<std::string> gone;
        while (dirent* e = readdir(d)) {
            if (std::strncmp(e->d_name, "uverbs", 6) != 0) continue;
            char* end = nullptr;
            unsigned long idx = std::strtoul(e->d_name + 6, &end, 10);
            if (end != e->d_name + 6 && *end == '\0' && idx >= devices.size()) gone.push_back(e->d_name);
        }
        closedir(d);
        for (const std::string& g : gone) remove_tree(verbs + "/" + g);
    }
    if (DIR* d = opendir(ib.c_str())) {
        std::vector<std::string> gone;
        while (dirent* e = readdir(d)) {
            if (e->d_name[0] == '.') continue;
            bool listed = false;
            for (const SysfsDevice& dev : devices) listed |= dev.ibdev == e->d_name;
            if (!listed) gone.push_back(e->d_name);
        }
        closedir(d);
        for (const std::string& g : gone) remove_tree(ib + "/" + g);
    }
}

}  // namespace

std::string default_sysfs_root(std::string* error)
{
    if (const char* xdg = std::getenv("XDG_RUNTIME_DIR"); xdg && xdg[0] == '/') {
        std::string base = xdg;
        if (is_private_dir(base) && access(base.c_str(), W_OK | X_OK) == 0) {
            std::string dir = base + "/iwemu";
            if (make_dir(dir, 0700, error) && is_private_dir(dir)) return dir + "/" + per_namespace_leaf();
        }
    }
    std::string dir = "/tmp/iwemu-" + std::to_string(getuid());
    if (!make_dir(dir, 0700, error)) return "";
    if (!is_private_dir(dir)) {
        *error = dir + " exists but is not a private directory owned by uid " + std::to_string(getuid());
        return "";
    }
    return dir + "/" + per_namespace_leaf();
}

std::string sysfs_tree_sync(const std::string& root, const std::vector<SysfsDevice>& devices)
{
    std::string err;
    const std::string cls = root + "/class";
    const std::string verbs = cls + "/infiniband_verbs";
    const std::string ib = cls + "/infiniband";
    for (const std::string& d : {root, cls, verbs, ib, cls + "/misc", cls + "/misc/rdma_cm"})
        if (!make_dir(d, 0755, &err)) return err;
    if (!sync_file(verbs + "/abi_version", std::to_string(kUverbsAbiVersion) + "\n", &err)) return err;
    if (!sync_file(cls + "/misc/rdma_cm/abi_version", std::to_string(kUcmaAbiVersion) + "\n", &err)) return err;

    for (size_t i = 0; i < devices.size(); ++i) {
        const SysfsDevice& dev = devices[i];
        const std::string uverbs = verbs + "/uverbs" + std::to_string(i);
        const std::string ibdev = ib + "/" + dev.ibdev;
        const std::string port = ibdev + "/ports/1";
        for (const std::string& d : {uverbs, ibdev, ibdev + "/ports", port, port + "/gids", port + "/pkeys"})
            if (!make_dir(d, 0755, &err)) return err;
        // The character device number the shim's stat and fstat give
        // /dev/infiniband/uverbsN (dev_nodes.cpp), as ib_uverbs numbers it:
        // libibverbs checks it at open, and ibv_import_device finds the
        // device of a command fd by it.
        const std::string cdev = std::to_string(kUverbsMajor) + ":" + std::to_string(kUverbsFirstMinor + i) + "\n";
        if (!sync_file(uverbs + "/ibdev", dev.ibdev + "\n", &err) || !sync_file(uverbs + "/dev", cdev, &err) ||
            !sync_file(uverbs + "/abi_version", std::to_string(kDeviceAbiVersion) + "\n", &err) ||
            !sync_file(ibdev + "/node_type", "4: RNIC\n", &err) ||
            !sync_file(ibdev + "/node_guid", format_node_guid(dev.node_guid) + "\n", &err) ||
            !sync_file(port + "/pkeys/0", "0xffff\n", &err))
            return err;
        if (std::string e = sync_attributes(ibdev, dev); !e.empty()) return e;
        // device/net/<ifname>: where programs (rdma-core's tests) find the
        // interface of an iWARP or RoCE device.
        const std::string net = ibdev + "/device/net";
        for (const std::string& d : {ibdev + "/device", net})
            if (!make_dir(d, 0755, &err)) return err;
        if (!dev.netdev.empty() && dev.netdev.find('/') == std::string::npos && dev.netdev[0] != '.' &&
            !make_dir(net + "/" + dev.netdev, 0755, &err))
            return err;
        prune_dirs_but(net, dev.netdev);
        // Matches the provider's "rdma_device:*Niwemu*" pattern whatever the
        // device is called (`rdma link add` takes any name).
        if (!sync_file(ibdev + "/device/modalias", "rdma_device:Niwemu\n", &err)) return err;
        for (size_t g = 0; g < dev.gids.size(); ++g)
            if (!sync_file(port + "/gids/" + std::to_string(g), format_gid(dev.gids[g]) + "\n", &err)) return err;
        prune_numbered(port + "/gids", dev.gids.size());
        // gid_attrs: the interface and type of each GID, as ib_core shows
        // them (an iWARP GID is of the IB type, shown "IB/RoCE v1").
        const std::string attrs = port + "/gid_attrs";
        for (const std::string& d : {attrs, attrs + "/ndevs", attrs + "/types"})
            if (!make_dir(d, 0755, &err)) return err;
        for (size_t g = 0; g < dev.gids.size(); ++g) {
            const std::string name = g < dev.gid_netdevs.size() ? dev.gid_netdevs[g] : dev.netdev;
            if (!sync_file(attrs + "/ndevs/" + std::to_string(g), name + "\n", &err) ||
                !sync_file(attrs + "/types/" + std::to_string(g), "IB/RoCE v1\n", &err))
                return err;
        }
        prune_numbered(attrs + "/ndevs", dev.gids.size());
        prune_numbered(attrs + "/types", dev.gids.size());
        // hw_counters: the names; reads through the shim give the values (hw_counter_files.h).
        if (!make_dir(port + "/hw_counters", 0755, &err)) return err;
        for (const auto& [name, value] : hw_counter_list(CounterValues{}))
            if (!sync_file(port + "/hw_counters/" + name, "0\n", &err)) return err;
    }
    prune_removed_devices(verbs, ib, devices);
    return "";
}

}  // namespace iwemu::shim
