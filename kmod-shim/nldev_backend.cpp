#include "kmod-shim/nldev_backend.h"

#include <net/if.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <mutex>

#include "emulator/config.h"
#include "emulator/device.h"
#include "emulator/emulator.h"
#include "emulator/port_netdev.h"
#include "kmod-shim/rdma_links.h"
#include "kmod-shim/sysfs_tree.h"
#include "kmod-shim/ucma_ids.h"
#include "emulator/status/status_reader.h"

namespace iwemu::shim {
namespace {

// rdma_cm_state numbers (cma_priv.h); DEVICE_REMOVAL (9) never happens here.
uint8_t kernel_cm_state(CmIdState s)
{
    return s == CmIdState::destroying ? 10 : static_cast<uint8_t>(s);
}

class ShimBackend final : public NldevBackend {
public:
    std::vector<NldevDevice> devices() override
    {
        const Config cfg = load_config();
        const std::vector<SysfsDevice> configured = configured_devices(cfg);
        Emulator* emu = Emulator::existing();
        const DeviceAttributes attrs = emu ? emu->device_attributes() : DeviceAttributes{};
        const PortAttributes port_defaults;
        std::vector<NldevDevice> out;
        for (size_t i = 0; i < configured.size(); ++i) {
            const SysfsDevice& s = configured[i];
            NldevDevice d;
            d.index = static_cast<uint32_t>(i);
            d.name = s.ibdev;
            d.node_guid = s.node_guid;
            d.fw_ver = firmware_version;
            d.cap_flags = attrs.device_cap_flags;
            d.user_added = i > 0;
            d.port_cap_flags = port_defaults.port_cap_flags;
            const PortNetdev nd = choose_port_netdev(s.netdev);
            d.netdev = nd.name;
            d.netdev_index = static_cast<uint32_t>(nd.ifindex);
            bool up = nd.ifindex == 0 ? nd.name.empty() : nd.up;
            if (i == 0 && emu) up = emu->port_attributes().state == 4;  // IBV_PORT_ACTIVE
            d.port_state = up ? 4 : 1;       // IB_PORT_ACTIVE : IB_PORT_DOWN
            d.port_phys_state = up ? 5 : 3;  // LinkUp : Disabled
            out.push_back(std::move(d));
        }
        return out;
    }

    ResourceSnapshot resources(uint32_t index) override
    {
        return shim_resources(index, false);
    }
    ResourceSnapshot statistics(uint32_t index) override { return shim_resources(index, true); }

    std::vector<NldevCmId> cm_ids(uint32_t index) override
    {
        std::vector<NldevCmId> out;
        if (index != 0) return out;
        std::lock_guard g(ucma_lock());
        ucma_id_for_each([&](const UcmaId& id) {
            out.push_back({id.handle, id.ps, kernel_cm_state(id.state), id.qp_num, id.src, id.dst});
        });
        return out;
    }

    uint32_t pid() override { return static_cast<uint32_t>(getpid()); }

    int link_add(const std::string& name, const std::string& type, const std::string& netdev) override
    {
        std::lock_guard g(links_lock_);
        if (type != "iwemu") return EINVAL;  // no such link type (siw's would be "siw")
        if (name.size() >= 64 || name.find('/') != std::string::npos || name[0] == '.') return EINVAL;
        if (netdev.size() >= IFNAMSIZ || if_nametoindex(netdev.c_str()) == 0) return ENODEV;
        const Config cfg = load_config();
        for (const SysfsDevice& d : configured_devices(cfg))
            if (d.ibdev == name) return EEXIST;
        for (const auto& [n, dev] : cfg.rdma_links)
            if (dev == netdev) return EEXIST;  // as siw: one device per interface
        if (std::string e = rdma_link_store(name, netdev); !e.empty()) return report(e, EIO);
        if (std::string e = rdma_links_sync_tree(); !e.empty()) return report(e, EIO);
        return 0;
    }

    int link_delete(uint32_t index) override
    {
        std::lock_guard g(links_lock_);
        const std::vector<SysfsDevice> devs = configured_devices(load_config());
        if (index == 0 || index >= devs.size()) return EINVAL;
        if (std::string e = rdma_link_forget(devs[index].ibdev); !e.empty()) return report(e, EIO);
        if (std::string e = rdma_links_sync_tree(); !e.empty()) return report(e, EIO);
        return 0;
    }

private:
    static int report(const std::string& what, int err)
    {
        std::fprintf(stderr, "iwemu: rdma link: %s\n", what.c_str());
        return err;
    }
    std::mutex links_lock_;
};

}  // namespace

ResourceSnapshot shim_resources(uint32_t index, bool tcp_info)
{
    // One emulator serves every device of the process; its objects are
    // shown on the first device, and so are the other processes' QPs.
    if (index != 0) return {};
    Emulator* emu = Emulator::existing();
    ResourceSnapshot s = emu ? emu->snapshot() : ResourceSnapshot{};
    StatusReadOptions opt;
    opt.tcp_info = tcp_info;
    const auto self = static_cast<uint32_t>(getpid());
    bool self_published = false;
    CounterValues port;
    for (ProcessStatus& p : read_process_status(opt)) {
        port += p.retired;
        for (const QpStatus& q : p.qps) {
            port += q.counters;
            if (p.pid == self) continue;  // ours: the snapshot has them, with their PD
            ResourceSnapshot::Qp e{q.qp_num, 0, q.state, p.pid, q.counters};
            s.qps.push_back(e);
        }
        if (p.pid == self) {
            self_published = true;
            // The snapshot's QPs with what the segment adds (TCP retransmits).
            for (ResourceSnapshot::Qp& mine : s.qps)
                for (const QpStatus& q : p.qps)
                    if (mine.pid == 0 && q.qp_num == mine.qp_num) mine.counters.tcp_retransmits = q.counters.tcp_retransmits;
        }
    }
    if (!self_published) port += s.port;  // no segment (no private directory): our own QPs only
    s.port = port;
    return s;
}

NldevBackend& shim_nldev_backend()
{
    static auto* backend = new ShimBackend;  // never destroyed: used from late calls
    return *backend;
}

}  // namespace iwemu::shim
