// A librdmacm connection of this process to itself over loopback, in the
// steps a test puts its own set-up between: a listener and a resolved
// client (give the client its QP), the connect and the server's request
// (give the server its QP), the accept and both ESTABLISHED events.
// Every wait is bounded; a failed step ends the test (REQUIRE).
#pragma once

#include <arpa/inet.h>
#include <poll.h>
#include <rdma/rdma_cma.h>

#include <cstdio>

#include "check.h"

namespace iwemu::test {

constexpr int kCmTimeoutMs = 5000;

// One CM event of `type` with status 0 on `ch` within the bound: its id.
inline rdma_cm_id* expect_cm_event(rdma_event_channel* ch, rdma_cm_event_type type)
{
    pollfd p{ch->fd, POLLIN, 0};
    if (poll(&p, 1, kCmTimeoutMs) != 1) {
        std::fprintf(stderr, "timeout waiting for %s\n", rdma_event_str(type));
        return nullptr;
    }
    rdma_cm_event* ev = nullptr;
    if (rdma_get_cm_event(ch, &ev) != 0) return nullptr;
    rdma_cm_id* id = ev->id;
    const bool ok = ev->event == type && ev->status == 0;
    if (!ok)
        std::fprintf(stderr, "got %s (status %d), wanted %s\n", rdma_event_str(ev->event), ev->status,
                     rdma_event_str(type));
    rdma_ack_cm_event(ev);
    return ok ? id : nullptr;
}

struct CmLoopback {
    rdma_event_channel* ech_s = nullptr;  // the listener's and the server's events
    rdma_event_channel* ech_c = nullptr;  // the client's
    rdma_cm_id* listen_id = nullptr;
    rdma_cm_id* client = nullptr;
};

// One Read each way in flight, as perftest and rdma-core's tests ask.
inline rdma_conn_param cm_conn_param()
{
    rdma_conn_param cp{};
    cp.responder_resources = 1;
    cp.initiator_depth = 1;
    return cp;
}

// A listener on an ephemeral loopback port and a client id whose address
// and route are resolved to it.
inline CmLoopback cm_loopback_resolved()
{
    CmLoopback l;
    l.ech_s = rdma_create_event_channel();
    l.ech_c = rdma_create_event_channel();
    REQUIRE(l.ech_s && l.ech_c);
    REQUIRE(rdma_create_id(l.ech_s, &l.listen_id, nullptr, RDMA_PS_TCP) == 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    REQUIRE(rdma_bind_addr(l.listen_id, reinterpret_cast<sockaddr*>(&addr)) == 0);
    REQUIRE(rdma_listen(l.listen_id, 4) == 0);
    addr.sin_port = rdma_get_src_port(l.listen_id);
    REQUIRE(addr.sin_port != 0);
    REQUIRE(rdma_create_id(l.ech_c, &l.client, nullptr, RDMA_PS_TCP) == 0);
    REQUIRE(rdma_resolve_addr(l.client, nullptr, reinterpret_cast<sockaddr*>(&addr), 2000) == 0);
    REQUIRE(expect_cm_event(l.ech_c, RDMA_CM_EVENT_ADDR_RESOLVED));
    REQUIRE(rdma_resolve_route(l.client, 2000) == 0);
    REQUIRE(expect_cm_event(l.ech_c, RDMA_CM_EVENT_ROUTE_RESOLVED));
    REQUIRE(l.client->verbs);
    return l;
}

// The client connects: the server's id from its CONNECT_REQUEST.
inline rdma_cm_id* cm_loopback_connect(const CmLoopback& l, rdma_conn_param& cp)
{
    REQUIRE(rdma_connect(l.client, &cp) == 0);
    rdma_cm_id* sid = expect_cm_event(l.ech_s, RDMA_CM_EVENT_CONNECT_REQUEST);
    REQUIRE(sid);
    return sid;
}

inline void cm_loopback_accept(const CmLoopback& l, rdma_cm_id* server, rdma_conn_param& cp)
{
    REQUIRE(rdma_accept(server, &cp) == 0);
    REQUIRE(expect_cm_event(l.ech_c, RDMA_CM_EVENT_ESTABLISHED));
    REQUIRE(expect_cm_event(l.ech_s, RDMA_CM_EVENT_ESTABLISHED));
}

// The listener and both channels (each side's id is the test's to destroy).
inline void cm_loopback_release(const CmLoopback& l)
{
    CHECK(rdma_destroy_id(l.listen_id) == 0);
    rdma_destroy_event_channel(l.ech_c);
    rdma_destroy_event_channel(l.ech_s);
}

}  // namespace iwemu::test
