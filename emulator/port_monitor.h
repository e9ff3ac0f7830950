// Port 1 follows one network interface, as a siw device follows its netdev:
// the interface going down is IBV_EVENT_PORT_ERR and the port DOWN, coming
// up is IBV_EVENT_PORT_ACTIVE, a new MAC address IBV_EVENT_LID_CHANGE (what
// siw_netdev_event reports for NETDEV_DOWN / NETDEV_UP / NETDEV_CHANGEADDR).
// Connections still use whatever interface routes them; only the port's
// state and its events follow the chosen one.
//
// The interface is the one the `netdev` setting names, else the one chosen
// when the emulator starts: the first non-loopback interface that is up and
// running, else the loopback interface (an isolated network namespace, or a
// host whose links are all down).  Its
// changes come from an rtnetlink socket (RTMGRP_LINK) read by a thread of
// its own, started with the first async event handler (the first device
// context) and asleep in poll() until a link message or stop.
#pragma once

#include <atomic>
#include <array>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <thread>

#include "emulator/port_netdev.h"
#include "emulator/verbs_types.h"

namespace iwemu {

// IBV_PORT_DOWN / IBV_PORT_ACTIVE and the matching phys_state values
// (Disabled / LinkUp), as siw_query_port derives one from the other.
inline constexpr uint32_t port_state_down = 1;
inline constexpr uint32_t port_state_active = 4;
inline constexpr uint8_t port_phys_state_disabled = 3;
inline constexpr uint8_t port_phys_state_link_up = 5;

// What one RTM_NEWLINK message says of an interface.
struct LinkStatus {
    int ifindex = 0;
    bool up = false;                         // IFF_UP (NETDEV_UP / NETDEV_DOWN)
    std::optional<std::array<uint8_t, 6>> mac;  // IFLA_ADDRESS when 6 octets
};

// Decodes the RTM_NEWLINK messages in one rtnetlink datagram and calls
// `each` for every one; other messages are skipped, a truncated one ends
// the walk.  Pure: no I/O.
void for_each_link_status(const uint8_t* data, size_t len, const std::function<void(const LinkStatus&)>& each);


class PortMonitor {
public:
    // on_event runs on the monitor's thread with no lock held.
    PortMonitor(const PortNetdev& netdev, std::function<void(AsyncEventType)> on_event);
    ~PortMonitor();  // stops and joins the thread
    PortMonitor(const PortMonitor&) = delete;
    PortMonitor& operator=(const PortMonitor&) = delete;

    // Starts watching (idempotent).  False, with a warning logged, when
    // rtnetlink cannot be opened: the port then keeps its state at start.
    bool start();
    uint32_t state() const { return up_.load(std::memory_order_relaxed) ? port_state_active : port_state_down; }
    const PortNetdev& netdev() const { return netdev_; }

    // Applies one interface's status (the thread's reader; tests).
    void apply(const LinkStatus& status);

private:
    void run();

    PortNetdev netdev_;
    std::function<void(AsyncEventType)> on_event_;
    std::atomic<bool> up_;
    std::array<uint8_t, 6> mac_{};  // monitor thread only after start
    bool mac_known_ = false;
    int nl_fd_ = -1;
    int stop_fd_ = -1;
    std::thread thread_;
};

}  // namespace iwemu
