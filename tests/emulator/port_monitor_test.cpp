// The port's state and events follow its interface (port_monitor.h): the
// rtnetlink decoder over hand-built messages, and the transitions.
#include <gtest/gtest.h>

#include <linux/netlink.h>
#include <linux/rtnetlink.h>
#include <net/if.h>

#include <cstring>
#include <vector>

#include "emulator/port_monitor.h"

namespace iwemu::test {
namespace {

// One RTM_NEWLINK / RTM_DELLINK message: header, ifinfomsg, IFLA_ADDRESS.
std::vector<uint8_t> link_message(uint16_t type, int ifindex, unsigned flags, std::vector<uint8_t> mac)
{
    const size_t attr_len = RTA_LENGTH(mac.size());
    const size_t len = NLMSG_ALIGN(NLMSG_LENGTH(sizeof(ifinfomsg))) + RTA_ALIGN(attr_len);
    std::vector<uint8_t> m(len, 0);
    nlmsghdr h{};
    h.nlmsg_len = static_cast<uint32_t>(len);
    h.nlmsg_type = type;
    std::memcpy(m.data(), &h, sizeof h);
    ifinfomsg info{};
    info.ifi_index = ifindex;
    info.ifi_flags = flags;
    std::memcpy(m.data() + NLMSG_HDRLEN, &info, sizeof info);
    rtattr a{};
    a.rta_len = static_cast<unsigned short>(attr_len);
    a.rta_type = IFLA_ADDRESS;
    const size_t at = NLMSG_ALIGN(NLMSG_LENGTH(sizeof(ifinfomsg)));
    std::memcpy(m.data() + at, &a, sizeof a);
    std::memcpy(m.data() + at + RTA_LENGTH(0), mac.data(), mac.size());
    return m;
}

std::vector<LinkStatus> decode(const std::vector<uint8_t>& bytes)
{
    std::vector<LinkStatus> out;
    for_each_link_status(bytes.data(), bytes.size(), [&](const LinkStatus& s) { out.push_back(s); });
    return out;
}

TEST(PortMonitor, DecodesLinkMessagesAndSkipsTheRest)
{
    auto up = link_message(RTM_NEWLINK, 7, IFF_UP | IFF_RUNNING, {2, 0, 0, 0, 0, 9});
    auto gone = link_message(RTM_DELLINK, 7, IFF_UP, {2, 0, 0, 0, 0, 9});
    auto other = link_message(RTM_NEWADDR, 7, IFF_UP, {1, 2, 3, 4});
    auto no_mac = link_message(RTM_NEWLINK, 8, 0, {1, 2, 3, 4});  // 4 octets: not a MAC
    std::vector<uint8_t> all;
    for (auto* m : {&up, &other, &gone, &no_mac}) all.insert(all.end(), m->begin(), m->end());
    const auto s = decode(all);
    ASSERT_EQ(s.size(), 3u);
    EXPECT_EQ(s[0].ifindex, 7);
    EXPECT_TRUE(s[0].up);
    ASSERT_TRUE(s[0].mac);
    EXPECT_EQ((*s[0].mac)[5], 9);
    EXPECT_EQ(s[1].ifindex, 7);
    EXPECT_FALSE(s[1].up);  // a deleted interface is down
    EXPECT_EQ(s[2].ifindex, 8);
    EXPECT_FALSE(s[2].up);
    EXPECT_FALSE(s[2].mac);
    // A message cut short ends the walk without reading past the datagram.
    for (size_t cut = 1; cut < up.size(); ++cut) {
        std::vector<uint8_t> part(up.begin(), up.begin() + static_cast<long>(cut));
        EXPECT_TRUE(decode(part).empty()) << cut;
    }
    // A length field larger than the datagram is not trusted.
    auto lying = up;
    const uint32_t big = 1u << 20;
    std::memcpy(lying.data(), &big, sizeof big);
    EXPECT_TRUE(decode(lying).empty());
}

TEST(PortMonitor, ReportsWhatSiwReportsForItsInterfaceOnly)
{
    PortNetdev dev;
    dev.ifindex = 5;
    dev.name = "test0";
    dev.up = true;
    dev.mac = std::array<uint8_t, 6>{2, 0, 0, 0, 0, 1};
    std::vector<AsyncEventType> events;
    PortMonitor m(dev, [&](AsyncEventType t) { events.push_back(t); });
    EXPECT_EQ(m.state(), port_state_active);

    LinkStatus s;
    s.ifindex = 6;  // another interface
    s.up = false;
    m.apply(s);
    EXPECT_TRUE(events.empty());
    EXPECT_EQ(m.state(), port_state_active);

    s.ifindex = 5;
    s.mac = dev.mac;
    m.apply(s);  // down
    m.apply(s);  // still down: nothing new
    EXPECT_EQ(m.state(), port_state_down);
    s.up = true;
    m.apply(s);
    s.mac = std::array<uint8_t, 6>{2, 0, 0, 0, 0, 2};
    m.apply(s);  // a new MAC, still up
    ASSERT_EQ(events.size(), 3u);
    EXPECT_EQ(events[0], AsyncEventType::port_err);
    EXPECT_EQ(events[1], AsyncEventType::port_active);
    EXPECT_EQ(events[2], AsyncEventType::lid_change);
    EXPECT_EQ(m.state(), port_state_active);
}

TEST(PortMonitor, AnInterfaceThatDoesNotExistIsADownPort)
{
    const PortNetdev dev = choose_port_netdev("nosuchdev0");
    EXPECT_EQ(dev.ifindex, 0);
    EXPECT_FALSE(dev.up);
    const PortNetdev lo = choose_port_netdev("lo");
    EXPECT_EQ(lo.ifindex, static_cast<int>(if_nametoindex("lo")));
}

}  // namespace
}  // namespace iwemu::test
