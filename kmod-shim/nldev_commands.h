// The RDMA netlink "nldev" commands (uapi rdma/rdma_netlink.h), answered as
// ib_core's nldev.c answers them, for the fake NETLINK_RDMA socket
// (rdma_netlink_socket.h).  Requests are parsed and replies built with
// libnl's nlmsg/nla API; what the replies say comes from an NldevBackend,
// so the protocol half is pure and testable (tests/unit/nldev_commands_test.cpp).
#pragma once

#include <sys/socket.h>

#include <cstddef>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "emulator/resource_snapshot.h"

namespace iwemu::shim {

struct NldevDevice {
    uint32_t index = 0;  // == N of uverbsN
    std::string name;
    uint64_t node_guid = 0;  // host order, as the kernel sends it
    std::string fw_ver;
    uint64_t cap_flags = 0;  // device_cap_flags
    bool user_added = false; // `rdma link add`ed: `rdma link delete` may remove it
    // Port 1
    uint8_t port_state = 4;       // IB_PORT_ACTIVE
    uint8_t port_phys_state = 5;  // LinkUp
    uint64_t port_cap_flags = 0;
    std::string netdev;           // "": none
    uint32_t netdev_index = 0;
};

struct NldevCmId {
    uint32_t id;
    uint32_t ps;
    uint8_t state;  // enum rdma_cm_state
    uint32_t qp_num;
    sockaddr_storage src, dst;
};

class NldevBackend {
public:
    virtual ~NldevBackend() = default;
    virtual std::vector<NldevDevice> devices() = 0;
    // The objects of this process on device `index` (empty if none).
    virtual ResourceSnapshot resources(uint32_t index) = 0;
    // The same for counters (rdma statistic): may cost more (TCP_INFO look-ups).
    virtual ResourceSnapshot statistics(uint32_t index) { return resources(index); }
    virtual std::vector<NldevCmId> cm_ids(uint32_t index) = 0;
    virtual uint32_t pid() = 0;
    // 0 or a positive errno, as the kernel's nldev_newlink / nldev_dellink.
    virtual int link_add(const std::string& name, const std::string& type, const std::string& netdev) = 0;
    virtual int link_delete(uint32_t index) = 0;
};

// Answers the netlink messages in buf[0, len) as netlink_rcv_skb() does:
// each request gets its reply, dump parts + NLMSG_DONE, or NLMSG_ERROR
// (errors always; success when NLM_F_ACK).  Returns the datagrams to
// deliver, each one netlink message of at most kMaxReply octets.
// port_id: the requesting socket's address (nlmsg_pid of the replies).
inline constexpr size_t kNldevMaxReply = 4096;  // libnl's default receive buffer is a page
std::vector<std::vector<uint8_t>> nldev_answer(const void* buf, size_t len, uint32_t port_id, NldevBackend& backend);

}  // namespace iwemu::shim
