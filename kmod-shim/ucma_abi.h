// The ucma ABI (rdma_cm character device, ABI version 4) as librdmacm 44
// writes it: the kernel's own uapi structs, pinned by size and offset so a
// header change or a packing surprise fails the build instead of corrupting
// an application's response buffer (kernel-surface.md §4.3, §4.4).
#pragma once

#include <netinet/in.h>
#include <sys/socket.h>

#include <cstddef>
#include <cstdint>

#include <rdma/rdma_user_cm.h>

// enum rdma_cm_event_type (librdmacm's <rdma/rdma_cma.h>; the kernel's
// enum rdma_cm_event_type has the same numbers).  Declared here so the shim
// does not depend on librdmacm's headers.
enum : uint32_t {
    RDMA_CM_EVENT_ADDR_RESOLVED = 0,
    RDMA_CM_EVENT_ADDR_ERROR = 1,
    RDMA_CM_EVENT_ROUTE_RESOLVED = 2,
    RDMA_CM_EVENT_ROUTE_ERROR = 3,
    RDMA_CM_EVENT_CONNECT_REQUEST = 4,
    RDMA_CM_EVENT_CONNECT_RESPONSE = 5,
    RDMA_CM_EVENT_CONNECT_ERROR = 6,
    RDMA_CM_EVENT_UNREACHABLE = 7,
    RDMA_CM_EVENT_REJECTED = 8,
    RDMA_CM_EVENT_ESTABLISHED = 9,
    RDMA_CM_EVENT_DISCONNECTED = 10,
    RDMA_CM_EVENT_DEVICE_REMOVAL = 11,
    RDMA_CM_EVENT_MULTICAST_JOIN = 12,
    RDMA_CM_EVENT_MULTICAST_ERROR = 13,
    RDMA_CM_EVENT_ADDR_CHANGE = 14,
    RDMA_CM_EVENT_TIMEWAIT_EXIT = 15,
};

namespace iwemu::shim::abi {

inline constexpr unsigned cmd_count = RDMA_USER_CM_CMD_JOIN_MCAST + 1;  // 23
inline constexpr uint32_t invalid_ibdev_index = 0xFFFFFFFF;
inline constexpr int af_ib = 27;  // AF_IB: librdmacm's probe family (never supported here)

// Kernel qp_state values (enum ib_qp_state == enum ibv_qp_state).
inline constexpr uint32_t qps_init = 1, qps_rtr = 2, qps_rts = 3;
// enum ib_qp_attr_mask / ib_access_flags bits INIT_QP_ATTR reports.
inline constexpr uint32_t qp_mask_state = 1u << 0, qp_mask_access_flags = 1u << 3,
                          qp_mask_port = 1u << 5;
inline constexpr uint32_t access_remote_write = 1u << 1, access_remote_read = 1u << 2,
                          access_remote_atomic = 1u << 3;
inline constexpr uint8_t qpt_rc = 2;  // enum ib_qp_type IB_QPT_RC (rdma_create_id's qp_type)

// IB CM reject reasons the kernel lets through rdma_reject (ucma_reject).
inline constexpr uint8_t rej_consumer_defined = 28, rej_vendor_option_not_supported = 35;

static_assert(sizeof(rdma_ucm_cmd_hdr) == 8);
static_assert(sizeof(rdma_ucm_create_id) == 24 && offsetof(rdma_ucm_create_id, ps) == 16);
static_assert(sizeof(rdma_ucm_destroy_id) == 16);
static_assert(sizeof(rdma_ucm_bind_ip) == 40 && offsetof(rdma_ucm_bind_ip, id) == 36);
static_assert(sizeof(rdma_ucm_bind) == 136 && offsetof(rdma_ucm_bind, addr) == 8);
static_assert(sizeof(rdma_ucm_resolve_ip) == 64 && offsetof(rdma_ucm_resolve_ip, id) == 56);
static_assert(sizeof(rdma_ucm_resolve_addr) == 272);
static_assert(sizeof(rdma_ucm_resolve_route) == 8);
static_assert(sizeof(rdma_ucm_query) == 16);
static_assert(sizeof(rdma_ucm_query_route_resp) == 208);
static_assert(offsetof(rdma_ucm_query_route_resp, src_addr) == 136);
static_assert(offsetof(rdma_ucm_query_route_resp, num_paths) == 192);
static_assert(offsetof(rdma_ucm_query_route_resp, port_num) == 196);
static_assert(offsetof(rdma_ucm_query_route_resp, ibdev_index) == 200);
static_assert(sizeof(rdma_ucm_query_addr_resp) == 280);
static_assert(sizeof(rdma_ucm_conn_param) == 272);
static_assert(offsetof(rdma_ucm_conn_param, private_data_len) == 264);
static_assert(offsetof(rdma_ucm_conn_param, valid) == 271);
static_assert(sizeof(rdma_ucm_connect) == 288 && offsetof(rdma_ucm_connect, id) == 272);
static_assert(sizeof(rdma_ucm_listen) == 8);
static_assert(sizeof(rdma_ucm_accept) == 296 && offsetof(rdma_ucm_accept, id) == 280);
static_assert(sizeof(rdma_ucm_reject) == 264);
static_assert(sizeof(rdma_ucm_disconnect) == 4);
static_assert(sizeof(rdma_ucm_init_qp_attr) == 16);
static_assert(sizeof(ib_uverbs_qp_attr) == 144);
static_assert(offsetof(ib_uverbs_qp_attr, qp_access_flags) == 36);
static_assert(offsetof(ib_uverbs_qp_attr, pkey_index) == 124);
static_assert(offsetof(ib_uverbs_qp_attr, port_num) == 133);
static_assert(sizeof(rdma_ucm_get_event) == 8);
static_assert(sizeof(rdma_ucm_event_resp) == 336);
static_assert(offsetof(rdma_ucm_event_resp, param) == 20);
static_assert(offsetof(rdma_ucm_event_resp, ece) == 328);
static_assert(sizeof(rdma_ucm_set_option) == 24);
static_assert(sizeof(rdma_ucm_notify) == 8);
static_assert(sizeof(rdma_ucm_join_ip_mcast) == 48);
static_assert(sizeof(rdma_ucm_join_mcast) == 152);
static_assert(sizeof(rdma_ucm_migrate_id) == 16);

}  // namespace iwemu::shim::abi
