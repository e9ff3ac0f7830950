#include "kmod-shim/ucma_ids.h"

#include <unistd.h>

namespace iwemu::shim {

namespace {

using S = CmIdState;

// from -> allowed targets.  Mirrors the cma.c transitions an iWARP id takes
// (cma_comp_exch call sites); destroying is reachable from everywhere.
struct Transition {
    S from;
    S to;
};
constexpr Transition transitions[] = {
    {S::idle, S::addr_bound},          {S::idle, S::addr_query},
    {S::idle, S::listen},              {S::addr_bound, S::addr_query},
    {S::addr_bound, S::listen},        {S::addr_query, S::addr_resolved},
    {S::addr_query, S::addr_bound},    // ADDR_ERROR: back to bound
    {S::addr_resolved, S::addr_query}, // resolve again
    {S::addr_resolved, S::route_query},{S::route_query, S::route_resolved},
    {S::route_query, S::addr_resolved},// ROUTE_ERROR
    {S::route_resolved, S::connect},   {S::connect, S::disconnect},
    {S::connect, S::route_resolved},   // CONNECT could not start (no QP, bad address)
    {S::listen, S::addr_bound},        // LISTEN could not start
    {S::disconnect, S::disconnect},    {S::connect, S::connect},
    {S::listen, S::listen},
};

}  // namespace

std::string_view to_string(CmIdState state) {
    switch (state) {
    case S::idle: return "idle";
    case S::addr_query: return "addr_query";
    case S::addr_resolved: return "addr_resolved";
    case S::route_query: return "route_query";
    case S::route_resolved: return "route_resolved";
    case S::connect: return "connect";
    case S::disconnect: return "disconnect";
    case S::addr_bound: return "addr_bound";
    case S::listen: return "listen";
    case S::destroying: return "destroying";
    }
    return "?";
}

bool cm_id_transition_allowed(CmIdState from, CmIdState to) {
    if (to == S::destroying) return from != S::destroying;
    for (const auto& t : transitions)
        if (t.from == from && t.to == to) return true;
    return false;
}

std::mutex& ucma_lock() {
    static std::mutex lock;
    return lock;
}

std::map<uint32_t, std::unique_ptr<UcmaId>>& ucma_id_table() {
    static auto* table = new std::map<uint32_t, std::unique_ptr<UcmaId>>;  // outlives exit handlers
    return *table;
}

UcmaId* ucma_id_create(UcmaFile* file) {
    // Ids start at 0 like the kernel's, but are not reused at once: a stale
    // handle held by a CM callback then finds nothing instead of a new id.
    static uint32_t next = 0;
    auto& table = ucma_id_table();
    uint32_t handle = next;
    while (table.count(handle)) ++handle;
    next = handle + 1;
    if (next > 0x7FFFFFFF) next = 0;
    auto id = std::make_unique<UcmaId>();
    id->handle = handle;
    id->file = file;
    auto* raw = id.get();
    table.emplace(handle, std::move(id));
    return raw;
}

UcmaId* ucma_id_find(uint32_t handle) {
    auto& table = ucma_id_table();
    auto it = table.find(handle);
    return it == table.end() ? nullptr : it->second.get();
}

UcmaId* ucma_id_find_on(UcmaFile* file, uint32_t handle) {
    UcmaId* id = ucma_id_find(handle);
    if (!id || id->file != file || id->state == S::destroying) return nullptr;
    if (id->is_child && !id->published) return nullptr;
    return id;
}

void ucma_id_erase(uint32_t handle) {
    auto& table = ucma_id_table();
    auto it = table.find(handle);
    if (it == table.end()) return;
    if (it->second->port_fd >= 0) ::close(it->second->port_fd);
    table.erase(it);
}

namespace {
std::map<uint64_t, uint32_t>& conn_table() {
    static auto* table = new std::map<uint64_t, uint32_t>;
    return *table;
}
}  // namespace

void ucma_conn_bind(uint64_t connection, uint32_t handle) {
    if (connection) conn_table()[connection] = handle;
}

uint32_t ucma_conn_find(uint64_t connection) {
    auto it = conn_table().find(connection);
    return it == conn_table().end() ? no_handle : it->second;
}

void ucma_conn_unbind(uint64_t connection) { conn_table().erase(connection); }

void ucma_forget_all_ids() {
    for (auto& [handle, id] : ucma_id_table())
        if (id->port_fd >= 0) ::close(id->port_fd);  // the child's copies of the reservations
    ucma_id_table().clear();
    conn_table().clear();
}

bool ucma_id_set_state(UcmaId& id, CmIdState to) {
    if (!cm_id_transition_allowed(id.state, to)) return false;
    id.state = to;
    return true;
}

}  // namespace iwemu::shim
