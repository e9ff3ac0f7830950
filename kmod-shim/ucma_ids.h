// The rdma_cm id table: what the kernel's ucma_context + rdma_id_private hold
// for one id, and the id state machine of drivers/infiniband/core/cma.c
// (enum rdma_cm_state), reduced to what an iWARP device goes through.
//
// All state lives behind ucma_lock(): commands come from application threads,
// CM events from the emulator's CM thread.  Nothing here blocks or calls into
// the emulator with the lock held.
#pragma once

#include <netinet/in.h>
#include <sys/socket.h>

#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string_view>

namespace iwemu::shim {

struct UcmaFile;
struct ConnectAttempt;

// == enum rdma_cm_state (cma_priv.h), same meaning per name.
enum class CmIdState : uint8_t {
    idle,            // created, no address
    addr_query,      // RESOLVE_IP in progress
    addr_resolved,   // ADDR_RESOLVED queued
    route_query,     // RESOLVE_ROUTE in progress
    route_resolved,  // ROUTE_RESOLVED queued: CONNECT allowed
    connect,         // MPA startup running or connection established
    disconnect,      // DISCONNECT issued or peer closed
    addr_bound,      // BIND_IP done
    listen,          // LISTEN done
    destroying,
};

std::string_view to_string(CmIdState state);
// The transition table: which state changes a command or CM event may make.
bool cm_id_transition_allowed(CmIdState from, CmIdState to);

struct UcmaId {
    uint32_t handle = 0;        // the "kernel" id returned by CREATE_ID
    uint64_t uid = 0;           // application pointer echoed in events (0: events dropped)
    uint16_t ps = 0;            // port space (RDMA_PS_TCP only in practice)
    uint8_t qp_type = 0;
    CmIdState state = CmIdState::idle;
    UcmaFile* file = nullptr;   // owning file; MIGRATE_ID moves it

    sockaddr_storage src{};     // bound / resolved local address (port included)
    sockaddr_storage dst{};     // peer address (port included)
    bool device_bound = false;  // QUERY_ROUTE reports the iwemu device's GUID
    bool has_iw_cm_id = false;  // passive child, or active after CONNECT (INIT_QP_ATTR table)
    uint32_t events_reported = 0;  // events handed out by GET_EVENT (DESTROY_ID answer)

    // Options (SET_OPTION level RDMA_OPTION_ID).
    uint8_t tos = 0;
    uint8_t ack_timeout = 0;       // RDMA_OPTION_ID_ACK_TIMEOUT, when ack_timeout_set
    bool ack_timeout_set = false;
    bool reuseaddr = false;
    int afonly = -1;            // -1: not set (system default)

    int port_fd = -1;           // socket that holds the bound port until LISTEN
    int backlog = 0;            // listen: connect requests allowed to wait for GET_EVENT
    int backlog_used = 0;

    uint32_t listener_handle = 0;  // passive child: the listen id (0: none)
    bool is_child = false;
    bool published = false;     // child: CONNECT_REQUEST handed out (id known to the app)

    uint64_t cm_listener = 0;   // cm::ListenerId
    uint64_t cm_connection = 0; // cm::ConnectionId
    uint32_t qp_num = 0;        // QP bound by CONNECT / ACCEPT
    std::shared_ptr<ConnectAttempt> connect_attempt;  // active: for retries of a refused connect
};

// The one process-wide lock of the rdma_cm emulation.
std::mutex& ucma_lock();

// Id table (all calls with ucma_lock() held).
UcmaId* ucma_id_create(UcmaFile* file);
UcmaId* ucma_id_find(uint32_t handle);
// Finds an id the application may name on `file` (published, on that file).
UcmaId* ucma_id_find_on(UcmaFile* file, uint32_t handle);
void ucma_id_erase(uint32_t handle);  // closes port_fd; caller tidied the rest
template <typename Fn> void ucma_id_for_each(Fn&& fn);
std::map<uint32_t, std::unique_ptr<UcmaId>>& ucma_id_table();

template <typename Fn>
void ucma_id_for_each(Fn&& fn) {
    for (auto& [handle, id] : ucma_id_table()) fn(*id);
}

// CM connection id -> rdma_cm id (passive children before ACCEPT report
// through their listener's handler).
void ucma_conn_bind(uint64_t connection, uint32_t handle);
uint32_t ucma_conn_find(uint64_t connection);  // 0xFFFFFFFF if unknown
void ucma_conn_unbind(uint64_t connection);
inline constexpr uint32_t no_handle = 0xFFFFFFFF;

// Drops every id and connection mapping without touching the CM (fork child).
void ucma_forget_all_ids();

// Moves an id to `to` with a check against the transition table; returns
// false (state unchanged) when the table forbids it.
bool ucma_id_set_state(UcmaId& id, CmIdState to);

}  // namespace iwemu::shim
