#include "emulator/port_monitor.h"

#include <linux/netlink.h>
#include <linux/rtnetlink.h>
#include <net/if.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "emulator/base/log.h"

namespace iwemu {

void for_each_link_status(const uint8_t* data, size_t len, const std::function<void(const LinkStatus&)>& each)
{
    size_t at = 0;
    while (len - at >= sizeof(nlmsghdr)) {
        nlmsghdr hdr;
        std::memcpy(&hdr, data + at, sizeof hdr);
        if (hdr.nlmsg_len < sizeof hdr || hdr.nlmsg_len > len - at) return;
        const uint8_t* msg = data + at;
        const size_t msg_len = hdr.nlmsg_len;
        at += std::min<size_t>(NLMSG_ALIGN(hdr.nlmsg_len), len - at);
        if (hdr.nlmsg_type != RTM_NEWLINK && hdr.nlmsg_type != RTM_DELLINK) continue;
        if (msg_len < NLMSG_LENGTH(sizeof(ifinfomsg))) continue;
        ifinfomsg info;
        std::memcpy(&info, msg + NLMSG_HDRLEN, sizeof info);
        LinkStatus status;
        status.ifindex = info.ifi_index;
        // An interface that is gone is down for good (siw: NETDEV_UNREGISTER).
        status.up = hdr.nlmsg_type == RTM_NEWLINK && (info.ifi_flags & IFF_UP);
        size_t attr_at = NLMSG_ALIGN(NLMSG_LENGTH(sizeof(ifinfomsg)));
        while (msg_len >= attr_at + sizeof(rtattr)) {
            rtattr attr;
            std::memcpy(&attr, msg + attr_at, sizeof attr);
            if (attr.rta_len < sizeof attr || attr.rta_len > msg_len - attr_at) break;
            if (attr.rta_type == IFLA_ADDRESS && attr.rta_len == RTA_LENGTH(6)) {
                std::array<uint8_t, 6> mac;
                std::memcpy(mac.data(), msg + attr_at + RTA_LENGTH(0), 6);
                status.mac = mac;
            }
            attr_at += RTA_ALIGN(attr.rta_len);
        }
        each(status);
    }
}

PortMonitor::PortMonitor(const PortNetdev& netdev, std::function<void(AsyncEventType)> on_event)
    : netdev_(netdev), on_event_(std::move(on_event)), up_(netdev.up)
{
    if (netdev.mac) {
        mac_ = *netdev.mac;
        mac_known_ = true;
    }
}

PortMonitor::~PortMonitor()
{
    if (thread_.joinable()) {
        const uint64_t one = 1;
        if (write(stop_fd_, &one, sizeof one) < 0) {}
        thread_.join();
    }
    if (nl_fd_ >= 0) close(nl_fd_);
    if (stop_fd_ >= 0) close(stop_fd_);
}

bool PortMonitor::start()
{
    if (thread_.joinable()) return true;
    if (netdev_.ifindex == 0) return false;
    nl_fd_ = socket(AF_NETLINK, SOCK_RAW | SOCK_CLOEXEC | SOCK_NONBLOCK, NETLINK_ROUTE);
    stop_fd_ = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
    sockaddr_nl local{};
    local.nl_family = AF_NETLINK;
    local.nl_groups = RTMGRP_LINK;
    if (nl_fd_ < 0 || stop_fd_ < 0 || bind(nl_fd_, reinterpret_cast<sockaddr*>(&local), sizeof local) != 0) {
        IWEMU_LOG(warn, "port 1 cannot follow %s (rtnetlink: %s): its state stays as at start",
                  netdev_.name.c_str(), std::strerror(errno));
        if (nl_fd_ >= 0) close(nl_fd_);
        if (stop_fd_ >= 0) close(stop_fd_);
        nl_fd_ = stop_fd_ = -1;
        return false;
    }
    thread_ = std::thread([this] { run(); });
    return true;
}

void PortMonitor::apply(const LinkStatus& status)
{
    if (status.ifindex != netdev_.ifindex) return;
    if (status.up != up_.load(std::memory_order_relaxed)) {
        up_.store(status.up, std::memory_order_relaxed);
        IWEMU_LOG(info, "port 1 (%s) %s", netdev_.name.c_str(), status.up ? "ACTIVE" : "DOWN");
        on_event_(status.up ? AsyncEventType::port_active : AsyncEventType::port_err);
    }
    if (status.mac && (!mac_known_ || *status.mac != mac_)) {
        const bool changed = mac_known_;
        mac_ = *status.mac;
        mac_known_ = true;
        if (changed) on_event_(AsyncEventType::lid_change);
    }
}

void PortMonitor::run()
{
    // Ask for the interface's state once subscribed, so a change between
    // choose_port_netdev() and the subscription is not missed (and again
    // after the socket overflowed).
    auto request_state = [this] {
        struct {
            nlmsghdr hdr;
            ifinfomsg info;
        } req{};
        req.hdr.nlmsg_len = sizeof req;
        req.hdr.nlmsg_type = RTM_GETLINK;
        req.hdr.nlmsg_flags = NLM_F_REQUEST;
        req.info.ifi_family = AF_UNSPEC;
        req.info.ifi_index = netdev_.ifindex;
        sockaddr_nl kernel{};
        kernel.nl_family = AF_NETLINK;
        if (sendto(nl_fd_, &req, sizeof req, 0, reinterpret_cast<sockaddr*>(&kernel), sizeof kernel) < 0)
            IWEMU_LOG(debug, "port monitor: RTM_GETLINK: %s", std::strerror(errno));
    };
    request_state();
    alignas(nlmsghdr) uint8_t buf[16384];
    for (;;) {
        pollfd fds[2] = {{nl_fd_, POLLIN, 0}, {stop_fd_, POLLIN, 0}};
        if (poll(fds, 2, -1) < 0) {
            if (errno == EINTR) continue;
            return;
        }
        if (fds[1].revents) return;
        for (;;) {
            const ssize_t n = recv(nl_fd_, buf, sizeof buf, 0);
            if (n < 0) {
                if (errno == ENOBUFS) {  // events were dropped: ask again
                    request_state();
                    continue;
                }
                break;  // EAGAIN (drained) or EINTR: back to poll
            }
            if (n == 0) break;
            for_each_link_status(buf, static_cast<size_t>(n), [this](const LinkStatus& s) { apply(s); });
        }
    }
}

}  // namespace iwemu
