#include "kmod-shim/ucma_commands.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <optional>
#include <cerrno>
#include <cstring>
#include <vector>

#include "emulator/emulator.h"
#include "kmod-shim/ucma_abi.h"
#include "kmod-shim/ucma_address.h"
#include "kmod-shim/ucma_cm_link.h"
#include "kmod-shim/ucma_events.h"
#include "kmod-shim/ucma_ids.h"
#include "kmod-shim/ucma_user_memory.h"

namespace iwemu::shim {

namespace {

using Lock = std::unique_lock<std::mutex>;

inline constexpr int max_backlog = 1024;  // net.rdma_ucm.max_backlog default

// Copies a command struct: at least min_in bytes must be present (older
// librdmacm versions send shorter CONNECT/ACCEPT without ECE), the rest is 0.
template <typename T>
int read_cmd(const uint8_t* in, size_t in_len, T* cmd, size_t min_in = sizeof(T)) {
    if (in_len < min_in) return -EINVAL;
    std::memset(cmd, 0, sizeof *cmd);
    std::memcpy(cmd, in, std::min(in_len, sizeof *cmd));
    return 0;
}

// Copies a response to the application's buffer: the kernel answers ENOSPC
// when the buffer is shorter than min_out, and copies at most out bytes.
template <typename T>
int write_resp(uint64_t response, size_t out, const T& resp, size_t min_out = sizeof(T)) {
    if (out < min_out) return -ENOSPC;
    return copy_to_user(response, &resp, std::min(out, sizeof resp));
}

void copy_to_in6(const sockaddr_storage& from, sockaddr_in6* to) {
    std::memset(to, 0, sizeof *to);
    std::memcpy(to, &from, std::min<size_t>(sockaddr_size(from.ss_family), sizeof *to));
}

// Work that must run after ucma_lock() is released (calls into the CM).
struct Deferred {
    std::vector<uint64_t> stop_listeners;
    std::vector<uint64_t> abort_connections;   // established: abortive close, then retire
    std::vector<uint64_t> reject_connections;  // never-accepted requests
    std::vector<uint64_t> retire_connections;  // closing gracefully already: just forget
    void run() {
        for (auto id : stop_listeners) ucma_cm_stop_listening(id);
        for (auto id : retire_connections) ucma_cm_destroy(id);
        // A Reject closes its connection itself once it is out; destroying
        // it behind the reject would cut the Reject off with an RST.
        for (auto id : reject_connections)
            if (ucma_cm_reject(id, {}) != 0) ucma_cm_destroy(id);
        for (auto id : abort_connections) {
            ucma_cm_disconnect(id, cm::DisconnectMode::abortive);
            ucma_cm_destroy(id);
        }
    }
};

// Removes one id and everything hanging off it (rdma_destroy_id / close).
// Returns its events_reported.  ucma_lock() held.
uint32_t destroy_id_locked(UcmaId& id, Deferred& later) {
    uint32_t reported = id.events_reported;
    const CmIdState was = id.state;
    id.state = CmIdState::destroying;
    // Queued events go with the id; a queued CONNECT_REQUEST takes its
    // never-seen child along (the kernel rejects such requests).
    for (const auto& ev : id.file->take_events_of(id.handle)) {
        if (ev.event != RDMA_CM_EVENT_CONNECT_REQUEST) continue;
        if (UcmaId* child = ucma_id_find(ev.child); child && !child->published) {
            if (child->cm_connection) {
                later.reject_connections.push_back(child->cm_connection);
                ucma_conn_unbind(child->cm_connection);
            }
            ucma_id_erase(child->handle);
        }
    }
    if (id.cm_listener) later.stop_listeners.push_back(id.cm_listener);
    if (id.cm_connection) {
        ucma_conn_unbind(id.cm_connection);
        // iw_destroy_cm_id: a request nobody answered is refused, a live
        // connection aborted, a graceful close left to finish.
        if (id.is_child && id.uid == 0)
            later.reject_connections.push_back(id.cm_connection);
        else if (was == CmIdState::disconnect)
            later.retire_connections.push_back(id.cm_connection);
        else
            later.abort_connections.push_back(id.cm_connection);
    }
    if (id.is_child && !id.published)
        if (UcmaId* listener = ucma_id_find(id.listener_handle)) --listener->backlog_used;
    ucma_id_erase(id.handle);
    return reported;
}

// A port another id of this process already holds (the kernel's rdma_cm
// port space check, cma_check_port): bound or listening ids only; accepted
// children and active ids do not own their port.
bool port_taken(const UcmaId& self, const sockaddr_storage& addr) {
    uint16_t port = port_of(addr);
    if (port == 0) return false;
    bool taken = false;
    ucma_id_for_each([&](const UcmaId& other) {
        if (&other == &self || other.is_child) return;
        if (other.state != CmIdState::addr_bound && other.state != CmIdState::listen) return;
        if (port_of(other.src) != port) return;
        if (self.reuseaddr && other.reuseaddr && other.state != CmIdState::listen) return;
        if (!is_wildcard(other.src) && !is_wildcard(addr) && !same_address(other.src, addr)) return;
        taken = true;
    });
    return taken;
}

// rdma_bind_addr for an IP address: the address must be local, the port
// free; port 0 picks one.  ucma_lock() held.
int bind_locked(UcmaId& id, const sockaddr_storage& addr_in) {
    if (id.state != CmIdState::idle) return -EINVAL;
    // An iWARP device has only the reliable-connected TCP port space: no UD
    // QPs (UDP, IPoIB) and no IB service ids.  Refusing here gives udaddy a
    // clear "Protocol not supported" instead of a server waiting forever.
    if (id.ps != RDMA_PS_TCP) return -EPROTONOSUPPORT;
    sockaddr_storage addr = addr_in;
    if (port_taken(id, addr)) return -EADDRINUSE;
    int fd = -1;
    if (int rc = reserve_port(&addr, id.afonly, &fd); rc < 0) return rc;
    id.port_fd = fd;
    id.src = addr;
    id.device_bound = !is_wildcard(addr);
    ucma_id_set_state(id, CmIdState::addr_bound);
    return 0;
}

void queue_event(UcmaId& id, uint32_t event, int32_t status) {
    UcmaEvent ev;
    ev.handle = id.handle;
    ev.event = event;
    ev.status = status;
    id.file->push(ev);
}

// ---- the commands --------------------------------------------------------

struct Ctx {
    const std::shared_ptr<UcmaFile>& file;
    const uint8_t* in;
    size_t in_len;
    size_t out;
};

// RDMA_OPTION_ID_ACK_TIMEOUT for the QP the id connects (none: not set).
std::optional<uint8_t> ack_timeout_of(const UcmaId& id) {
    if (!id.ack_timeout_set) return std::nullopt;
    return id.ack_timeout;
}

int cmd_create_id(Ctx& c) {
    rdma_ucm_create_id cmd;
    if (int rc = read_cmd(c.in, c.in_len, &cmd); rc < 0) return rc;
    // Every port space is accepted here, as by the kernel (librdmacm's AF_IB
    // probe creates an RDMA_PS_IB id); only TCP ids may take an address
    // (bind_locked), so UDP/IPoIB users fail at their first bind or resolve.
    if (cmd.ps != RDMA_PS_TCP && cmd.ps != RDMA_PS_UDP && cmd.ps != RDMA_PS_IPOIB &&
        cmd.ps != RDMA_PS_IB)
        return -EINVAL;
    Lock lock(ucma_lock());
    if (c.file->closed) return -EBADF;
    UcmaId* id = ucma_id_create(c.file.get());
    id->uid = cmd.uid;
    id->ps = cmd.ps;
    id->qp_type = cmd.qp_type;
    rdma_ucm_create_id_resp resp{};
    resp.id = id->handle;
    if (int rc = write_resp(cmd.response, c.out, resp); rc < 0) {
        ucma_id_erase(id->handle);
        return rc;
    }
    return 0;
}

int cmd_destroy_id(Ctx& c) {
    rdma_ucm_destroy_id cmd;
    if (int rc = read_cmd(c.in, c.in_len, &cmd); rc < 0) return rc;
    if (c.out < sizeof(rdma_ucm_destroy_id_resp)) return -ENOSPC;
    Deferred later;
    rdma_ucm_destroy_id_resp resp{};
    {
        Lock lock(ucma_lock());
        UcmaId* id = ucma_id_find_on(c.file.get(), cmd.id);
        if (!id) return -ENOENT;
        resp.events_reported = destroy_id_locked(*id, later);
    }
    later.run();
    return write_resp(cmd.response, c.out, resp);
}

int cmd_bind_ip(Ctx& c) {
    rdma_ucm_bind_ip cmd;
    if (int rc = read_cmd(c.in, c.in_len, &cmd); rc < 0) return rc;
    sockaddr_storage addr;
    if (int rc = copy_sockaddr(&cmd.addr, sizeof cmd.addr, &addr); rc < 0) return rc;
    Lock lock(ucma_lock());
    UcmaId* id = ucma_id_find_on(c.file.get(), cmd.id);
    if (!id) return -ENOENT;
    return bind_locked(*id, addr);
}

int cmd_bind(Ctx& c) {
    rdma_ucm_bind cmd;
    if (int rc = read_cmd(c.in, c.in_len, &cmd); rc < 0) return rc;
    if (cmd.addr_size > sizeof cmd.addr) return -EINVAL;
    sockaddr_storage addr;
    if (int rc = copy_sockaddr(&cmd.addr, cmd.addr_size, &addr); rc < 0) return rc;
    Lock lock(ucma_lock());
    UcmaId* id = ucma_id_find_on(c.file.get(), cmd.id);
    if (!id) return -ENOENT;
    return bind_locked(*id, addr);
}

// rdma_resolve_addr: picks the source the routing table would use (binding
// the id to it when unbound) and queues ADDR_RESOLVED or ADDR_ERROR.  The
// answer is immediate: the device is on every local address.
int resolve_locked(UcmaId& id, const sockaddr_storage* src, const sockaddr_storage& dst_in) {
    if (id.state != CmIdState::idle && id.state != CmIdState::addr_bound &&
        id.state != CmIdState::addr_resolved)
        return -EINVAL;
    if (id.ps != RDMA_PS_TCP) return -EPROTONOSUPPORT;  // see bind_locked
    sockaddr_storage dst = dst_in;
    if (src && src->ss_family && src->ss_family != dst.ss_family) return -EINVAL;
    if (id.state == CmIdState::idle) {
        sockaddr_storage local{};
        if (src && src->ss_family) {
            local = *src;
        } else {
            local.ss_family = dst.ss_family;  // wildcard: filled from the route below
        }
        if (int rc = bind_locked(id, local); rc < 0) return rc;
    } else if (id.src.ss_family != dst.ss_family) {
        return -EINVAL;
    }
    ucma_id_set_state(id, CmIdState::addr_query);
    sockaddr_storage route_src{};
    int rc = route_source(dst, &route_src);
    if (rc < 0) {
        ucma_id_set_state(id, CmIdState::addr_bound);
        queue_event(id, RDMA_CM_EVENT_ADDR_ERROR, rc);
        return 0;
    }
    if (is_wildcard(id.src)) {  // keep the port, take the routed address
        uint16_t port = port_of(id.src);
        id.src = route_src;
        set_port(id.src, port);
    }
    if (is_wildcard(dst)) {  // cma_resolve_loopback: a wildcard destination is this host
        uint16_t port = port_of(dst);
        dst = route_src;
        set_port(dst, port);
    }
    id.dst = dst;
    id.device_bound = true;
    ucma_id_set_state(id, CmIdState::addr_resolved);
    queue_event(id, RDMA_CM_EVENT_ADDR_RESOLVED, 0);
    return 0;
}

int cmd_resolve_ip(Ctx& c) {
    rdma_ucm_resolve_ip cmd;
    if (int rc = read_cmd(c.in, c.in_len, &cmd); rc < 0) return rc;
    sockaddr_storage src{}, dst;
    if (cmd.src_addr.sin6_family != 0)
        if (int rc = copy_sockaddr(&cmd.src_addr, sizeof cmd.src_addr, &src); rc < 0) return rc;
    if (int rc = copy_sockaddr(&cmd.dst_addr, sizeof cmd.dst_addr, &dst); rc < 0) return rc;
    Lock lock(ucma_lock());
    UcmaId* id = ucma_id_find_on(c.file.get(), cmd.id);
    if (!id) return -ENOENT;
    return resolve_locked(*id, &src, dst);
}

int cmd_resolve_addr(Ctx& c) {
    rdma_ucm_resolve_addr cmd;
    if (int rc = read_cmd(c.in, c.in_len, &cmd); rc < 0) return rc;
    if (cmd.src_size > sizeof cmd.src_addr || cmd.dst_size > sizeof cmd.dst_addr) return -EINVAL;
    sockaddr_storage src{}, dst;
    if (cmd.src_size)
        if (int rc = copy_sockaddr(&cmd.src_addr, cmd.src_size, &src); rc < 0) return rc;
    if (int rc = copy_sockaddr(&cmd.dst_addr, cmd.dst_size, &dst); rc < 0) return rc;
    Lock lock(ucma_lock());
    UcmaId* id = ucma_id_find_on(c.file.get(), cmd.id);
    if (!id) return -ENOENT;
    return resolve_locked(*id, &src, dst);
}

// iWARP has no path records: the route is the TCP connection to come.
int cmd_resolve_route(Ctx& c) {
    rdma_ucm_resolve_route cmd;
    if (int rc = read_cmd(c.in, c.in_len, &cmd); rc < 0) return rc;
    Lock lock(ucma_lock());
    UcmaId* id = ucma_id_find_on(c.file.get(), cmd.id);
    if (!id) return -ENOENT;
    if (!ucma_id_set_state(*id, CmIdState::route_query)) return -EINVAL;
    ucma_id_set_state(*id, CmIdState::route_resolved);
    queue_event(*id, RDMA_CM_EVENT_ROUTE_RESOLVED, 0);
    return 0;
}

int cmd_query_route(Ctx& c, UcmaId& id, uint64_t response) {
    rdma_ucm_query_route_resp resp{};
    if (id.device_bound) {
        resp.node_guid = device_node_guid_be();
        resp.port_num = 1;  // librdmacm indexes its port table with port_num - 1
    }
    copy_to_in6(id.src, &resp.src_addr);
    copy_to_in6(id.dst, &resp.dst_addr);
    resp.num_paths = 0;
    resp.ibdev_index = abi::invalid_ibdev_index;  // match by GUID (sysfs mode)
    return write_resp(response, c.out, resp, offsetof(rdma_ucm_query_route_resp, ibdev_index));
}

int cmd_query_addr(Ctx& c, UcmaId& id, uint64_t response) {
    rdma_ucm_query_addr_resp resp{};
    if (id.device_bound) {
        resp.node_guid = device_node_guid_be();
        resp.port_num = 1;
    }
    resp.src_size = sockaddr_size(id.src.ss_family);
    resp.dst_size = sockaddr_size(id.dst.ss_family);
    std::memcpy(&resp.src_addr, &id.src, resp.src_size);
    std::memcpy(&resp.dst_addr, &id.dst, resp.dst_size);
    resp.ibdev_index = abi::invalid_ibdev_index;
    return write_resp(response, c.out, resp);
}

int cmd_query(Ctx& c, bool route_only) {
    rdma_ucm_query cmd;
    if (int rc = read_cmd(c.in, c.in_len, &cmd, offsetof(rdma_ucm_query, option)); rc < 0) return rc;
    Lock lock(ucma_lock());
    UcmaId* id = ucma_id_find_on(c.file.get(), cmd.id);
    if (!id) return -ENOENT;
    if (route_only) return cmd_query_route(c, *id, cmd.response);
    switch (cmd.option) {
    case RDMA_USER_CM_QUERY_ADDR:
    case RDMA_USER_CM_QUERY_GID:
        return cmd_query_addr(c, *id, cmd.response);
    case RDMA_USER_CM_QUERY_PATH: {
        rdma_ucm_query_path_resp resp{};  // no path records on iWARP
        return write_resp(cmd.response, c.out, resp);
    }
    default:
        return -ENOSYS;
    }
}

int cmd_listen(Ctx& c) {
    rdma_ucm_listen cmd;
    if (int rc = read_cmd(c.in, c.in_len, &cmd); rc < 0) return rc;
    int backlog = (cmd.backlog == 0 || cmd.backlog > max_backlog) ? max_backlog : int(cmd.backlog);
    sockaddr_storage addr;
    uint32_t handle;
    {
        Lock lock(ucma_lock());
        UcmaId* id = ucma_id_find_on(c.file.get(), cmd.id);
        if (!id) return -ENOENT;
        if (id->state == CmIdState::listen) {  // rdma_listen again: new backlog only
            id->backlog = backlog;
            return 0;
        }
        if (id->state == CmIdState::idle) {  // rdma_listen binds an idle id to 0.0.0.0:0
            sockaddr_storage any{};
            any.ss_family = AF_INET;
            if (int rc = bind_locked(*id, any); rc < 0) return rc;
        }
        if (!ucma_id_set_state(*id, CmIdState::listen)) return -EINVAL;
        id->backlog = backlog;
        addr = id->src;
        handle = id->handle;
        // The CM's listener takes the port over from the reservation.
        if (id->port_fd >= 0) ::close(id->port_fd);
        id->port_fd = -1;
    }
    cm::ListenerId lid = 0;
    sockaddr_storage bound{};
    int rc = ucma_cm_listen(
        addr, backlog, [handle](const cm::CmEvent& ev) { ucma_on_cm_event(handle, ev); }, &lid,
        &bound);
    Lock lock(ucma_lock());
    UcmaId* id = ucma_id_find(handle);
    if (!id || id->state != CmIdState::listen) {  // destroyed meanwhile
        lock.unlock();
        if (rc == 0) ucma_cm_stop_listening(lid);
        return id ? -EINVAL : -ENOENT;
    }
    if (rc < 0) {
        ucma_id_set_state(*id, CmIdState::addr_bound);
        return rc;
    }
    id->cm_listener = lid;
    return 0;
}

std::span<const uint8_t> private_data_of(const rdma_ucm_conn_param& p) {
    return {p.private_data, std::min<size_t>(p.private_data_len, RDMA_MAX_PRIVATE_DATA)};
}

int cmd_connect(Ctx& c) {
    rdma_ucm_connect cmd;
    if (int rc = read_cmd(c.in, c.in_len, &cmd, offsetof(rdma_ucm_connect, ece)); rc < 0) return rc;
    if (!cmd.conn_param.valid) return -EINVAL;
    auto attempt = std::make_shared<ConnectAttempt>();
    cm::ConnectArgs& args = attempt->args;
    uint32_t handle;
    std::optional<uint8_t> ack_timeout;
    {
        Lock lock(ucma_lock());
        UcmaId* id = ucma_id_find_on(c.file.get(), cmd.id);
        if (!id) return -ENOENT;
        if (!ucma_id_set_state(*id, CmIdState::connect)) return -EINVAL;
        id->has_iw_cm_id = true;
        ack_timeout = ack_timeout_of(*id);
        id->qp_num = cmd.conn_param.qp_num & 0xFFFFFF;
        id->connect_attempt = attempt;
        handle = id->handle;
        args.remote = id->dst;
        if (!is_wildcard(id->src)) {
            // Source address only: the TCP source port is the kernel's pick,
            // so a TIME_WAIT left by an earlier connection never blocks us.
            sockaddr_storage local = id->src;
            set_port(local, 0);
            args.local = local;
        }
        if (id->port_fd >= 0) ::close(id->port_fd);
        id->port_fd = -1;
    }
    int rc = ucma_qp_endpoint(cmd.conn_param.qp_num & 0xFFFFFF, &args.endpoint, ack_timeout);
    if (rc == 0) {
        auto pd = private_data_of(cmd.conn_param);
        attempt->private_data.assign(pd.begin(), pd.end());
        args.private_data = attempt->private_data;
        args.ird = cmd.conn_param.responder_resources;
        args.ord = cmd.conn_param.initiator_depth;
        rc = ucma_start_connect(handle, attempt);
        if (rc == 0) return 0;
    }
    Lock lock(ucma_lock());
    if (UcmaId* id = ucma_id_find(handle); id && id->state == CmIdState::connect) {
        ucma_id_set_state(*id, CmIdState::route_resolved);
        id->has_iw_cm_id = false;
        id->connect_attempt.reset();
    }
    return rc;
}

// A passive child the application may still answer (ACCEPT / REJECT).
UcmaId* pending_child(UcmaFile* file, uint32_t handle, int* err) {
    UcmaId* id = ucma_id_find_on(file, handle);
    *err = -ENOENT;
    if (!id) return nullptr;
    *err = -EINVAL;
    if (!id->is_child || id->state != CmIdState::connect || id->uid != 0 || !id->cm_connection)
        return nullptr;
    return id;
}

int cmd_accept(Ctx& c) {
    rdma_ucm_accept cmd;
    if (int rc = read_cmd(c.in, c.in_len, &cmd, offsetof(rdma_ucm_accept, ece)); rc < 0) return rc;
    if (!cmd.conn_param.valid) return -EINVAL;  // iWARP has no RTU-style ACCEPT
    uint32_t handle;
    cm::ConnectionId conn;
    std::optional<uint8_t> ack_timeout;
    {
        Lock lock(ucma_lock());
        int err;
        UcmaId* id = pending_child(c.file.get(), cmd.id, &err);
        if (!id) return err;
        if (cmd.uid == 0) return -EINVAL;
        id->uid = cmd.uid;  // from now on the child's events reach the application
        id->qp_num = cmd.conn_param.qp_num & 0xFFFFFF;
        handle = id->handle;
        conn = id->cm_connection;
        ack_timeout = ack_timeout_of(*id);
    }
    cm::AcceptArgs args;
    int rc = ucma_qp_endpoint(cmd.conn_param.qp_num & 0xFFFFFF, &args.endpoint, ack_timeout);
    if (rc == 0) {
        args.ird = cmd.conn_param.responder_resources;
        args.ord = cmd.conn_param.initiator_depth;
        args.private_data = private_data_of(cmd.conn_param);
        args.handler = [handle](const cm::CmEvent& ev) { ucma_on_cm_event(handle, ev); };
        rc = ucma_cm_accept(conn, args);
        if (rc == -ENOENT) rc = -ECONNRESET;  // the request died meanwhile
    }
    if (rc < 0) {
        Lock lock(ucma_lock());
        if (UcmaId* id = ucma_id_find(handle)) id->uid = 0;
    }
    return rc;
}

int cmd_reject(Ctx& c) {
    rdma_ucm_reject cmd;
    if (int rc = read_cmd(c.in, c.in_len, &cmd); rc < 0) return rc;
    // ucma_reject's reason check (IB CM reasons; meaningless on iWARP).
    if (cmd.reason != 0 && cmd.reason != abi::rej_consumer_defined &&
        cmd.reason != abi::rej_vendor_option_not_supported)
        return -EINVAL;
    cm::ConnectionId conn;
    {
        Lock lock(ucma_lock());
        int err;
        UcmaId* id = pending_child(c.file.get(), cmd.id, &err);
        if (!id) return err;
        conn = id->cm_connection;
        ucma_conn_unbind(conn);
        id->cm_connection = 0;
        ucma_id_set_state(*id, CmIdState::disconnect);
    }
    uint8_t len = std::min<uint8_t>(cmd.private_data_len, RDMA_MAX_PRIVATE_DATA - 1);
    int rc = ucma_cm_reject(conn, {cmd.private_data, len});
    return rc == -ENOENT ? 0 : rc;  // a request that died meanwhile is rejected already
}

int cmd_disconnect(Ctx& c) {
    rdma_ucm_disconnect cmd;
    if (int rc = read_cmd(c.in, c.in_len, &cmd); rc < 0) return rc;
    cm::ConnectionId conn;
    {
        Lock lock(ucma_lock());
        UcmaId* id = ucma_id_find_on(c.file.get(), cmd.id);
        if (!id) return -ENOENT;
        if (id->state == CmIdState::disconnect) return 0;  // closing already (iw_cm CLOSING)
        if (id->state != CmIdState::connect || !id->has_iw_cm_id) return -EINVAL;
        ucma_id_set_state(*id, CmIdState::disconnect);
        conn = id->cm_connection;
    }
    if (!conn) return 0;
    int rc = ucma_cm_disconnect(conn, cm::DisconnectMode::graceful);
    return (rc == -ENOENT || rc == -ENOTSUP) ? 0 : rc;
}

// rdma_init_qp_attr for an iWARP id (cma.c + iwcm.c, kernel-surface.md §4.6).
int cmd_init_qp_attr(Ctx& c) {
    rdma_ucm_init_qp_attr cmd;
    if (int rc = read_cmd(c.in, c.in_len, &cmd); rc < 0) return rc;
    if (c.out < sizeof(ib_uverbs_qp_attr)) return -ENOSPC;
    if (cmd.qp_state > 6) return -EINVAL;
    // iw_cm grants remote write and read.  iwemu also offers RFC 7306
    // atomics, which a responder checks against the QP's rights: they are
    // granted too, as the IB CM grants them with responder resources
    // (cm_init_qp_init_attr), so rdma_cm applications (qperf -cm1) can use them.
    const uint32_t remote_access = abi::access_remote_write | abi::access_remote_read |
                                   (Emulator::instance().device_attributes().atomic_cap ? abi::access_remote_atomic : 0);
    Lock lock(ucma_lock());
    UcmaId* id = ucma_id_find_on(c.file.get(), cmd.id);
    if (!id) return -ENOENT;
    if (!id->device_bound) return -EINVAL;
    ib_uverbs_qp_attr resp{};
    resp.qp_state = cmd.qp_state;
    if (!id->has_iw_cm_id) {
        resp.qp_attr_mask = abi::qp_mask_state | abi::qp_mask_access_flags;
        resp.qp_access_flags = 0;
    } else if (cmd.qp_state == abi::qps_init || cmd.qp_state == abi::qps_rtr) {
        resp.qp_attr_mask = abi::qp_mask_state | abi::qp_mask_access_flags;
        resp.qp_access_flags = remote_access;
    } else if (cmd.qp_state == abi::qps_rts) {
        resp.qp_attr_mask = 0;  // the CM moves the QP to RTS itself
    } else {
        return -EINVAL;
    }
    resp.qp_attr_mask |= abi::qp_mask_port;
    resp.port_num = 1;
    resp.pkey_index = 0;
    return write_resp(cmd.response, c.out, resp);
}

int cmd_set_option(Ctx& c) {
    rdma_ucm_set_option cmd;
    if (int rc = read_cmd(c.in, c.in_len, &cmd); rc < 0) return rc;
    if (cmd.optlen > 4096) return -EINVAL;
    uint8_t optval[sizeof(int)] = {};  // every option ucma knows is at most an int
    if (cmd.optlen <= sizeof optval)
        if (int rc = copy_from_user(optval, cmd.optval, cmd.optlen); rc < 0) return rc;
    Lock lock(ucma_lock());
    UcmaId* id = ucma_id_find_on(c.file.get(), cmd.id);
    if (!id) return -ENOENT;
    if (cmd.level == RDMA_OPTION_IB) return cmd.optname == RDMA_OPTION_IB_PATH ? -EINVAL : -ENOSYS;
    if (cmd.level != RDMA_OPTION_ID) return -ENOSYS;
    switch (cmd.optname) {
    case RDMA_OPTION_ID_TOS:
        if (cmd.optlen != sizeof(uint8_t)) return -EINVAL;
        std::memcpy(&id->tos, optval, 1);
        return 0;
    case RDMA_OPTION_ID_REUSEADDR: {
        if (cmd.optlen != sizeof(int)) return -EINVAL;
        if (id->state != CmIdState::idle) return -EINVAL;
        int v;
        std::memcpy(&v, optval, sizeof v);
        id->reuseaddr = v != 0;
        return 0;
    }
    case RDMA_OPTION_ID_AFONLY: {
        if (cmd.optlen != sizeof(int)) return -EINVAL;
        if (id->state != CmIdState::idle) return -EINVAL;
        int v;
        std::memcpy(&v, optval, sizeof v);
        id->afonly = v != 0;
        return 0;
    }
    case RDMA_OPTION_ID_ACK_TIMEOUT:  // IB retransmission timer: no meaning over TCP, kept for the QP
        if (cmd.optlen != sizeof(uint8_t)) return -EINVAL;
        if (id->qp_type != abi::qpt_rc) return -EINVAL;  // the kernel's rule (RC and XRC initiator only)
        std::memcpy(&id->ack_timeout, optval, 1);
        id->ack_timeout_set = true;
        return 0;
    default:
        return -ENOSYS;
    }
}

int cmd_notify(Ctx& c) {
    rdma_ucm_notify cmd;
    if (int rc = read_cmd(c.in, c.in_len, &cmd); rc < 0) return rc;
    Lock lock(ucma_lock());
    UcmaId* id = ucma_id_find_on(c.file.get(), cmd.id);
    if (!id) return -ENOENT;
    return id->device_bound ? 0 : -EINVAL;  // IB communication-established hint: nothing to do
}

// iWARP has no multicast (rdma_join_multicast answers ENOSYS for it).
int cmd_join_mcast(Ctx& c, uint32_t id_handle) {
    Lock lock(ucma_lock());
    UcmaId* id = ucma_id_find_on(c.file.get(), id_handle);
    if (!id) return -ENOENT;
    return -ENOSYS;
}

int cmd_join_ip_mcast(Ctx& c) {
    rdma_ucm_join_ip_mcast cmd;
    if (int rc = read_cmd(c.in, c.in_len, &cmd); rc < 0) return rc;
    return cmd_join_mcast(c, cmd.id);
}

int cmd_join_mcast_af(Ctx& c) {
    rdma_ucm_join_mcast cmd;
    if (int rc = read_cmd(c.in, c.in_len, &cmd); rc < 0) return rc;
    return cmd_join_mcast(c, cmd.id);
}

int cmd_leave_mcast(Ctx& c) {
    rdma_ucm_destroy_id cmd;
    if (int rc = read_cmd(c.in, c.in_len, &cmd); rc < 0) return rc;
    return -ENOENT;  // no multicast id can exist
}

// rdma_migrate_id: written on the NEW file, names the old one by fd.
int cmd_migrate_id(Ctx& c) {
    rdma_ucm_migrate_id cmd;
    if (int rc = read_cmd(c.in, c.in_len, &cmd); rc < 0) return rc;
    if (c.out < sizeof(rdma_ucm_migrate_resp)) return -ENOSPC;
    std::shared_ptr<UcmaFile> old_file = ucma_file_by_fd(static_cast<int>(cmd.fd));
    if (!old_file) {
        if (::fcntl(static_cast<int>(cmd.fd), F_GETFD) < 0) return -ENOENT;  // fdget failed
        return -EINVAL;  // an fd, but not an rdma_cm file
    }
    rdma_ucm_migrate_resp resp{};
    {
        Lock lock(ucma_lock());
        UcmaId* id = ucma_id_find_on(old_file.get(), cmd.id);
        if (!id) return -ENOENT;
        if (c.file->closed) return -EBADF;
        resp.events_reported = id->events_reported;
        if (old_file != c.file) {
            id->file = c.file.get();
            for (const auto& ev : old_file->take_events_of(id->handle)) {
                if (ev.event == RDMA_CM_EVENT_CONNECT_REQUEST)
                    if (UcmaId* child = ucma_id_find(ev.child)) child->file = c.file.get();
                c.file->push(ev);
            }
        }
    }
    return write_resp(cmd.response, c.out, resp);
}

// rdma_get_cm_event: blocks (unless the fd is O_NONBLOCK) until an event is
// queued; the child id of a CONNECT_REQUEST becomes visible here.
int cmd_get_event(Ctx& c) {
    rdma_ucm_get_event cmd;
    if (int rc = read_cmd(c.in, c.in_len, &cmd); rc < 0) return rc;
    if (c.out < sizeof(rdma_ucm_event_resp)) return -ENOSPC;
    rdma_ucm_event_resp resp{};
    // Check the buffer before taking an event: a bad pointer must not lose it.
    if (int rc = copy_to_user(cmd.response, &resp, sizeof resp); rc < 0) return rc;
    for (;;) {
        {
            Lock lock(ucma_lock());
            UcmaEvent ev;
            bool found = false;
            while (!found && c.file->pop(&ev)) {
                UcmaId* id = ucma_id_find(ev.handle);
                if (!id || id->state == CmIdState::destroying) continue;
                resp = {};
                resp.uid = id->uid;
                resp.id = id->handle;
                if (ev.event == RDMA_CM_EVENT_CONNECT_REQUEST) {
                    UcmaId* child = ucma_id_find(ev.child);
                    if (!child) continue;
                    child->published = true;
                    resp.id = child->handle;
                    if (id->backlog_used > 0) --id->backlog_used;
                }
                resp.event = ev.event;
                resp.status = static_cast<uint32_t>(ev.status);
                resp.param.conn = ev.conn;
                ++id->events_reported;
                found = true;
            }
            if (found) break;
        }
        int fl = ::fcntl(c.file->fd, F_GETFL);
        if (fl >= 0 && (fl & O_NONBLOCK)) return -EAGAIN;
        if (int rc = ucma_file_wait(*c.file); rc < 0) return rc;
    }
    return copy_to_user(cmd.response, &resp, sizeof resp);
}

}  // namespace

int ucma_execute(const std::shared_ptr<UcmaFile>& file, const void* buf, size_t len) {
    // The largest command (ACCEPT) with room to spare; in is a u16 anyway.
    uint8_t kbuf[sizeof(rdma_ucm_cmd_hdr) + 512];
    rdma_ucm_cmd_hdr hdr;
    if (len < sizeof hdr) return -EINVAL;
    uint64_t user = reinterpret_cast<uintptr_t>(buf);
    if (int rc = copy_from_user(&hdr, user, sizeof hdr); rc < 0) return rc;
    if (hdr.cmd >= abi::cmd_count) return -EINVAL;
    if (size_t{hdr.in} + sizeof hdr > len) return -EINVAL;
    size_t in = std::min<size_t>(hdr.in, sizeof kbuf - sizeof hdr);  // longer tails are ignored
    if (int rc = copy_from_user(kbuf, user + sizeof hdr, in); rc < 0) return rc;
    Ctx c{file, kbuf, in, hdr.out};
    switch (hdr.cmd) {
    case RDMA_USER_CM_CMD_CREATE_ID: return cmd_create_id(c);
    case RDMA_USER_CM_CMD_DESTROY_ID: return cmd_destroy_id(c);
    case RDMA_USER_CM_CMD_BIND_IP: return cmd_bind_ip(c);
    case RDMA_USER_CM_CMD_RESOLVE_IP: return cmd_resolve_ip(c);
    case RDMA_USER_CM_CMD_RESOLVE_ROUTE: return cmd_resolve_route(c);
    case RDMA_USER_CM_CMD_QUERY_ROUTE: return cmd_query(c, true);
    case RDMA_USER_CM_CMD_CONNECT: return cmd_connect(c);
    case RDMA_USER_CM_CMD_LISTEN: return cmd_listen(c);
    case RDMA_USER_CM_CMD_ACCEPT: return cmd_accept(c);
    case RDMA_USER_CM_CMD_REJECT: return cmd_reject(c);
    case RDMA_USER_CM_CMD_DISCONNECT: return cmd_disconnect(c);
    case RDMA_USER_CM_CMD_INIT_QP_ATTR: return cmd_init_qp_attr(c);
    case RDMA_USER_CM_CMD_GET_EVENT: return cmd_get_event(c);
    case RDMA_USER_CM_CMD_GET_OPTION: return -ENOSYS;  // the kernel never implemented it
    case RDMA_USER_CM_CMD_SET_OPTION: return cmd_set_option(c);
    case RDMA_USER_CM_CMD_NOTIFY: return cmd_notify(c);
    case RDMA_USER_CM_CMD_JOIN_IP_MCAST: return cmd_join_ip_mcast(c);
    case RDMA_USER_CM_CMD_LEAVE_MCAST: return cmd_leave_mcast(c);
    case RDMA_USER_CM_CMD_MIGRATE_ID: return cmd_migrate_id(c);
    case RDMA_USER_CM_CMD_QUERY: return cmd_query(c, false);
    case RDMA_USER_CM_CMD_BIND: return cmd_bind(c);
    case RDMA_USER_CM_CMD_RESOLVE_ADDR: return cmd_resolve_addr(c);
    case RDMA_USER_CM_CMD_JOIN_MCAST: return cmd_join_mcast_af(c);
    }
    return -EINVAL;
}

void ucma_destroy_file_ids(UcmaFile* file) {
    Deferred later;
    {
        Lock lock(ucma_lock());
        std::vector<uint32_t> handles;
        ucma_id_for_each([&](const UcmaId& id) {
            if (id.file == file && !(id.is_child && !id.published)) handles.push_back(id.handle);
        });
        for (uint32_t h : handles)
            if (UcmaId* id = ucma_id_find(h)) destroy_id_locked(*id, later);
        file->shut();
    }
    later.run();
}

}  // namespace iwemu::shim
