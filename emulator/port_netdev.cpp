#include "emulator/port_netdev.h"

#include <ifaddrs.h>
#include <net/if.h>
#include <netpacket/packet.h>

#include <cstring>

#include "emulator/base/log.h"

namespace iwemu {

PortNetdev choose_port_netdev(const std::string& name)
{
    PortNetdev chosen;
    chosen.name = name;  // kept when nothing is found
    ifaddrs* list = nullptr;
    if (getifaddrs(&list) != 0) {
        chosen.up = true;  // nothing to follow: the port stays ACTIVE
        return chosen;
    }
    const ifaddrs* pick = nullptr;
    const ifaddrs* loopback = nullptr;
    for (const ifaddrs* i = list; i && !pick; i = i->ifa_next) {
        if (!i->ifa_addr || i->ifa_addr->sa_family != AF_PACKET) continue;  // one AF_PACKET entry per interface
        const bool running = (i->ifa_flags & IFF_UP) && (i->ifa_flags & IFF_RUNNING);
        if (!name.empty()) {
            if (name == i->ifa_name) pick = i;
        } else if (i->ifa_flags & IFF_LOOPBACK) {
            if (!loopback) loopback = i;
        } else if (running) {
            pick = i;
        }
    }
    if (!pick && name.empty()) pick = loopback;
    if (pick) {
        const auto* ll = reinterpret_cast<const sockaddr_ll*>(pick->ifa_addr);
        chosen.ifindex = ll->sll_ifindex;
        chosen.name = pick->ifa_name;
        chosen.up = (pick->ifa_flags & IFF_UP) && (pick->ifa_flags & IFF_RUNNING);
        if (ll->sll_halen == 6) {
            std::array<uint8_t, 6> mac;
            std::memcpy(mac.data(), ll->sll_addr, 6);
            chosen.mac = mac;
        }
    } else if (!name.empty()) {
        log_message(LogLevel::error, "netdev '%s' (IWEMU_NETDEV) does not exist: port 1 is DOWN",
                    name.c_str());
    } else {
        chosen.up = true;  // no interface at all: nothing to follow
    }
    freeifaddrs(list);
    return chosen;
}

}  // namespace iwemu
