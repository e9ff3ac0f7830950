// The rdma_cm emulation's link to the emulator: the process-wide connection
// manager (emulator/cm, our iw_cm), the QP a CONNECT / ACCEPT names by
// number, and the translation of CM events into rdma_cm events
// (kernel cma_iw_handler / iw_conn_req_handler, kernel-surface.md §4.4).
//
// Nothing here is called with ucma_lock() held; the event handlers take it.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <vector>

#include "emulator/cm/connection_manager.h"

namespace iwemu::shim {

// Forwarders to the CM every rdma_cm id of this process uses.  It is created
// on first use and deliberately never destroyed: process exit must not wait
// for its thread (applications exit with connections up, kernel-surface.md
// §7.3 item 25d).  Same return conventions as cm::ConnectionManager.
int ucma_cm_listen(const sockaddr_storage& addr, int backlog, cm::CmEventHandler handler,
                   cm::ListenerId* id, sockaddr_storage* bound);
int ucma_cm_stop_listening(cm::ListenerId id);
int ucma_cm_connect(const cm::ConnectArgs& args, cm::ConnectionId* id);
int ucma_cm_accept(cm::ConnectionId id, const cm::AcceptArgs& args);
int ucma_cm_reject(cm::ConnectionId id, std::span<const uint8_t> private_data);
int ucma_cm_disconnect(cm::ConnectionId id, cm::DisconnectMode mode);
void ucma_cm_destroy(cm::ConnectionId id);

// One rdma_connect: what it takes to start the TCP/MPA connect again.
struct ConnectAttempt {
    cm::ConnectArgs args;               // args.private_data points into private_data
    std::vector<uint8_t> private_data;
    int refused = 0;                    // TCP connects refused so far
    uint64_t ended = 0;                 // last CM connection id whose outcome arrived
    std::chrono::steady_clock::time_point started = std::chrono::steady_clock::now();
};

// Starts the connect of the active id `handle` (state connect).  0 or
// -errno; the outcome arrives as a CM event.  A refused TCP connect is
// tried again for a short while before REJECTED is reported: programs such
// as qperf publish their port between rdma_bind_addr and rdma_listen, a
// window the kernel's slower connect path hides.
int ucma_start_connect(uint32_t handle, const std::shared_ptr<ConnectAttempt>& attempt);

// fork(): the child gets a CM of its own on next use (the parent's CM
// thread does not exist there).  Called in the child, single-threaded.
void ucma_cm_forget_after_fork();

// How a negotiated connection reaches the QP numbered qp_num (24 bits, any
// ibv_context of the process).  0, or -EINVAL when no such QP exists.
// ack_timeout: RDMA_OPTION_ID_ACK_TIMEOUT, given to the QP as its `timeout`
// attribute (no effect over TCP; it reads back, as rdma_cm sets it on an RC QP).
int ucma_qp_endpoint(uint32_t qp_num, cm::Endpoint* endpoint, std::optional<uint8_t> ack_timeout = std::nullopt);

// Handler for every CM event of the id `handle` (a listener's, or an active /
// accepted connection's).  Runs on the CM thread.
void ucma_on_cm_event(uint32_t handle, const cm::CmEvent& event);

// Largest IRD/ORD the device grants (ibv_device_attr max_qp_rd_atom /
// max_qp_init_rd_atom), used when a peer left them "not negotiated".
uint8_t ucma_device_max_rd_atom();

}  // namespace iwemu::shim
