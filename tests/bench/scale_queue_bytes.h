// What the emulator preallocates per queue entry, for scale_bench's "per-QP
// memory beyond the queue buffers".  The application cannot see these sizes;
// tests/emulator/scale_memory_test.cpp measures them (heap growth per extra
// entry) and fails when they drift from the values here.
#pragma once

#include <cstddef>
#include <cstdint>

namespace iwemu::scale {

// One send WQE: the WQE itself (wr_id, opcode, flags, remote address, rkey,
// length, progress) plus its slice of the SGE array and of the inline buffer.
inline constexpr size_t send_wqe_bytes = 88;
inline constexpr size_t send_sge_bytes = 24;  // ibv_sge (addr, length, lkey) + its host address delta
// One receive WQE: fixed size, room for recv_wqe_max_sge (16) SGEs.
inline constexpr size_t recv_wqe_bytes = 280;
// One CQ entry (the emulator's Completion, converted to ibv_wc when polled).
inline constexpr size_t cqe_bytes = 40;

// The queue buffers of one QP with its own CQ, as granted by create_qp/create_cq.
constexpr size_t queue_buffer_bytes(uint32_t max_send_wr, uint32_t max_send_sge, uint32_t max_inline,
                                    uint32_t max_recv_wr, uint32_t cqe)
{
    return size_t{max_send_wr} * (send_wqe_bytes + size_t{max_send_sge} * send_sge_bytes + max_inline) +
           size_t{max_recv_wr} * recv_wqe_bytes + size_t{cqe} * cqe_bytes;
}

}  // namespace iwemu::scale
