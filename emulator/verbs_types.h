// Public value types of the emulator API: work requests, completions, QP
// attributes, async events.  libibverbs-free on purpose (the emulator layer
// must not depend on the provider's headers), but every enumerator carries the
// numeric value of its ibv_* counterpart (libibverbs 44 <infiniband/verbs.h>)
// so the provider converts with a static_cast and the kmod shim can copy raw
// uverbs values.  A static_assert block in provider/ can check that 1:1.
#pragma once

#include <cstddef>
#include <cstdint>

namespace iwemu {

class ProtectionDomain;
class MemoryRegion;
class MemoryWindow;
class CompletionQueue;
class SharedReceiveQueue;
class QueuePair;

// == enum ibv_wc_status
enum class WcStatus : uint32_t {
    success = 0,
    loc_len_err = 1,
    loc_qp_op_err = 2,
    loc_eec_op_err = 3,
    loc_prot_err = 4,
    wr_flush_err = 5,
    mw_bind_err = 6,
    bad_resp_err = 7,
    loc_access_err = 8,
    rem_inv_req_err = 9,
    rem_access_err = 10,
    rem_op_err = 11,
    retry_exc_err = 12,
    rnr_retry_exc_err = 13,
    loc_rdd_viol_err = 14,
    rem_inv_rd_req_err = 15,
    rem_abort_err = 16,
    inv_eecn_err = 17,
    inv_eec_state_err = 18,
    fatal_err = 19,
    resp_timeout_err = 20,
    general_err = 21,
};

// == enum ibv_wc_opcode
enum class WcOpcode : uint32_t {
    send = 0,
    rdma_write = 1,
    rdma_read = 2,
    comp_swap = 3,
    fetch_add = 4,
    bind_mw = 5,
    local_inv = 6,
    recv = 1u << 7,
    recv_rdma_with_imm = (1u << 7) + 1,
};

// == enum ibv_wc_flags (subset)
inline constexpr uint32_t wc_with_imm = 1u << 1;
inline constexpr uint32_t wc_with_inv = 1u << 3;

// == enum ibv_wr_opcode
enum class WrOpcode : uint32_t {
    rdma_write = 0,
    rdma_write_with_imm = 1,
    send = 2,
    send_with_imm = 3,
    rdma_read = 4,
    atomic_cmp_and_swp = 5,
    atomic_fetch_and_add = 6,
    local_inv = 7,
    bind_mw = 8,
    send_with_inv = 9,
};

// == enum ibv_send_flags
inline constexpr uint32_t send_fence = 1u << 0;
inline constexpr uint32_t send_signaled = 1u << 1;
inline constexpr uint32_t send_solicited = 1u << 2;
inline constexpr uint32_t send_inline = 1u << 3;

// == enum ibv_access_flags
inline constexpr uint32_t access_local_write = 1u << 0;
inline constexpr uint32_t access_remote_write = 1u << 1;
inline constexpr uint32_t access_remote_read = 1u << 2;
inline constexpr uint32_t access_remote_atomic = 1u << 3;
inline constexpr uint32_t access_mw_bind = 1u << 4;
inline constexpr uint32_t access_zero_based = 1u << 5;
// On-demand paging: nothing is pinned here anyway; the region's memory may
// be unmapped, so the data path touches it only through odp_memory.h.
inline constexpr uint32_t access_on_demand = 1u << 6;

// == enum ibv_qp_state
enum class QpState : uint32_t {
    reset = 0,
    init = 1,
    rtr = 2,
    rts = 3,
    sqd = 4,
    sqe = 5,
    err = 6,
};

// == enum ibv_qp_attr_mask (the bits an RC QP on an iWARP device looks at)
inline constexpr uint32_t qp_attr_state = 1u << 0;
inline constexpr uint32_t qp_attr_cur_state = 1u << 1;
inline constexpr uint32_t qp_attr_en_sqd_async_notify = 1u << 2;
inline constexpr uint32_t qp_attr_access_flags = 1u << 3;
inline constexpr uint32_t qp_attr_pkey_index = 1u << 4;
inline constexpr uint32_t qp_attr_port = 1u << 5;
inline constexpr uint32_t qp_attr_qkey = 1u << 6;
inline constexpr uint32_t qp_attr_av = 1u << 7;
inline constexpr uint32_t qp_attr_path_mtu = 1u << 8;
inline constexpr uint32_t qp_attr_timeout = 1u << 9;
inline constexpr uint32_t qp_attr_retry_cnt = 1u << 10;
inline constexpr uint32_t qp_attr_rnr_retry = 1u << 11;
inline constexpr uint32_t qp_attr_rq_psn = 1u << 12;
inline constexpr uint32_t qp_attr_max_qp_rd_atomic = 1u << 13;
inline constexpr uint32_t qp_attr_alt_path = 1u << 14;
inline constexpr uint32_t qp_attr_min_rnr_timer = 1u << 15;
inline constexpr uint32_t qp_attr_sq_psn = 1u << 16;
inline constexpr uint32_t qp_attr_max_dest_rd_atomic = 1u << 17;
inline constexpr uint32_t qp_attr_path_mig_state = 1u << 18;
inline constexpr uint32_t qp_attr_cap = 1u << 19;
inline constexpr uint32_t qp_attr_dest_qpn = 1u << 20;

// == enum ibv_event_type
enum class AsyncEventType : uint32_t {
    cq_err = 0,
    qp_fatal = 1,
    qp_req_err = 2,
    qp_access_err = 3,
    comm_est = 4,
    sq_drained = 5,
    path_mig = 6,
    path_mig_err = 7,
    device_fatal = 8,
    port_active = 9,
    port_err = 10,
    lid_change = 11,
    pkey_change = 12,
    sm_change = 13,
    srq_err = 14,
    srq_limit_reached = 15,
    qp_last_wqe_reached = 16,
    client_reregister = 17,
    gid_change = 18,
};

// == enum ibv_mw_type
enum class MwType : uint32_t {
    type1 = 1,
    type2 = 2,
};

// == struct ibv_send_wr.bind_mw (the ibv_mw_bind_info in it, flattened):
// what a Bind Memory Window work request needs.  ibv_bind_mw (type 1) is
// posted as this too, with rkey = ibv_inc_rkey(the window's rkey).
struct MwBind {
    MemoryWindow* mw = nullptr;
    MemoryRegion* mr = nullptr;   // nullptr (or length 0): unbind, type 1 only
    uint64_t addr = 0;            // first octet of the window, a Tagged Offset of mr
    uint64_t length = 0;
    uint32_t rkey = 0;            // the window's STag after the bind: its index, a new 8-bit key
    uint32_t access = 0;          // access_remote_* (access_local_write ignored; access_zero_based refused)
};

// == struct ibv_sge
struct Sge {
    uint64_t addr = 0;
    uint32_t length = 0;
    uint32_t lkey = 0;
};

// == struct ibv_send_wr, flattened (RC only; no UD/XRC).
struct SendWr {
    uint64_t wr_id = 0;
    WrOpcode opcode = WrOpcode::send;
    uint32_t send_flags = 0;      // send_* bits
    const Sge* sg_list = nullptr;
    uint32_t num_sge = 0;
    uint64_t remote_addr = 0;     // RDMA Write / Read / atomics: remote Tagged Offset (wr.rdma / wr.atomic)
    uint32_t rkey = 0;            // RDMA Write / Read / atomics: remote STag
    uint32_t invalidate_rkey = 0; // send_with_inv: STag the peer invalidates; local_inv: local STag
    uint32_t imm_data = 0;        // rdma_write_with_imm, host order (send_with_imm: EOPNOTSUPP)
    uint64_t compare_add = 0;     // atomics (wr.atomic.compare_add): CmpSwap compare value, FetchAdd addend
    uint64_t swap = 0;            // atomic_cmp_and_swp: the value stored when the compare matches
    MwBind bind;                  // bind_mw only (read for no other opcode)
};

// == struct ibv_recv_wr
struct RecvWr {
    uint64_t wr_id = 0;
    const Sge* sg_list = nullptr;
    uint32_t num_sge = 0;
};

// == struct ibv_wc (fields an RC QP fills)
struct Completion {
    uint64_t wr_id = 0;
    WcStatus status = WcStatus::success;
    WcOpcode opcode = WcOpcode::send;
    uint32_t vendor_err = 0;
    uint32_t byte_len = 0;
    uint32_t imm_data_or_inv_rkey = 0;  // host order; the invalidated STag with wc_with_inv
    uint32_t qp_num = 0;
    uint32_t src_qp = 0;
    uint32_t wc_flags = 0;
};

// == struct ibv_qp_cap
struct QpCap {
    uint32_t max_send_wr = 0;
    uint32_t max_recv_wr = 0;
    uint32_t max_send_sge = 0;
    uint32_t max_recv_sge = 0;
    uint32_t max_inline_data = 0;
};

// == struct ibv_qp_init_attr (RC only).  create_qp() writes the granted
// capacities back into cap, as ibv_create_qp does.
struct QpInitAttr {
    CompletionQueue* send_cq = nullptr;
    CompletionQueue* recv_cq = nullptr;
    SharedReceiveQueue* srq = nullptr;
    QpCap cap;
    bool sq_sig_all = false;
};

// == struct ibv_qp_attr (fields meaningful for an iWARP RC QP)
struct QpAttr {
    QpState qp_state = QpState::reset;
    QpState cur_qp_state = QpState::reset;
    uint32_t path_mtu = 5;         // IBV_MTU_4096
    uint32_t qp_access_flags = 0;
    QpCap cap;
    uint16_t pkey_index = 0;
    uint8_t en_sqd_async_notify = 0;
    uint8_t sq_draining = 0;
    uint8_t max_rd_atomic = 0;     // ORD
    uint8_t max_dest_rd_atomic = 0;  // IRD
    uint8_t port_num = 1;
    uint8_t timeout = 0;
    uint8_t retry_cnt = 0;
    uint8_t rnr_retry = 0;
    uint8_t min_rnr_timer = 0;
    uint32_t dest_qp_num = 0;
    uint32_t rq_psn = 0;
    uint32_t sq_psn = 0;
};

// == struct ibv_srq_attr
struct SrqAttr {
    uint32_t max_wr = 0;
    uint32_t max_sge = 0;
    uint32_t srq_limit = 0;
};
// == enum ibv_srq_attr_mask
inline constexpr uint32_t srq_attr_max_wr = 1u << 0;
inline constexpr uint32_t srq_attr_limit = 1u << 1;

// == struct ibv_async_event: exactly one element pointer is set (by type).
struct AsyncEvent {
    AsyncEventType type = AsyncEventType::qp_fatal;
    QueuePair* qp = nullptr;
    CompletionQueue* cq = nullptr;
    SharedReceiveQueue* srq = nullptr;
    uint8_t port_num = 0;
};

// Connection-level events of one QP, for the CM (rdma_cm ESTABLISHED /
// DISCONNECTED) and the shim.  Delivered from an emulator thread or from the
// thread that caused them; never with an emulator lock held.
enum class QpConnectionEvent : uint8_t {
    established,        // data path running (after attach_connection, RTR exchanged)
    peer_closed,        // FIN from the peer (graceful), or our disconnect() finished
    terminated,         // a Terminate was sent or received; the QP is in ERROR
    connection_error,   // RST / socket error / peer vanished; the QP is in ERROR
};

}  // namespace iwemu
