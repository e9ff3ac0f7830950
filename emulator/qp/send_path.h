// The QP's send path: the send queue ring, the ORQ (our Reads and Atomic
// Requests awaiting a response), the IRQ (inbound Read and Atomic Requests
// to answer), the message the TX is framing and the batch of FPDUs that
// leaves in one sendmsg.
//
// Guarded by QueuePair::sq_lock_ (backlog and window_closed are also read
// without it).  Driven by tx_engine.cpp, tx_coalesce.cpp, immediate_data.cpp,
// atomics.cpp, memory_window.cpp and qp.cpp (post_send, flush); the receive
// path (rx_engine.cpp) queues IRQ entries and retires ORQ entries.
#pragma once

#include <sys/uio.h>

#include <array>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

#include "emulator/qp/atomic_ops.h"
#include "emulator/verbs_types.h"
#include "emulator/wire/fpdu.h"
#include "emulator/wire/terminate_message.h"

namespace iwemu {

struct SendPath {
    enum class WqePhase : uint8_t { queued, sending, awaiting_response, done };
    struct SendWqe {
        uint64_t wr_id = 0;
        WrOpcode opcode = WrOpcode::send;
        uint32_t flags = 0;
        uint32_t num_sge = 0;
        Sge* sge = nullptr;          // slice of sq_sge (max_send_sge entries)
        uint64_t* host_delta = nullptr;  // slice of sq_sge_host_delta: per SGE, host address - Tagged Offset
        uint8_t* inline_buf = nullptr;  // slice of sq_inline (max_inline entries)
        uint64_t remote_addr = 0;
        uint32_t rkey = 0;
        union {                      // one per opcode: none adds an octet to the WQE
            uint32_t inv_rkey = 0;   // send_with_inv, local_inv
            uint32_t imm_data;       // rdma_write_with_imm: host order (immediate_data.cpp)
            uint32_t atomic_id;      // atomics: the Request Identifier sent (atomics.cpp)
        };
        uint64_t length = 0;
        WqePhase phase = WqePhase::queued;
        WcStatus status = WcStatus::success;
        uint64_t placed = 0;         // Read: Read Response octets placed
    };
    // SendWqe::flags bit of our own (beside ibv_send_flags): a Read's sink is
    // in an ODP region (local_sge_ok), its Read Responses are placed fault-safe.
    static constexpr uint32_t wqe_odp_sink = 1u << 31;

    // One inbound Read Request the responder's TX answers (RFC 5040 §5.2),
    // or an Atomic Request (RFC 7306 §5.2, atomics.cpp: atomic set; the
    // request id in sink_stag, the original value in sink_to once
    // performed, the target word at source/source_to, its operands in
    // atomic_ops at the same index).  Both share the IRQ, so responses
    // leave in request order (EXT-007).
    struct ReadResponseJob {
        uint32_t sink_stag = 0;
        bool atomic = false;
        bool performed = false;
        uint64_t sink_to = 0;
        uint32_t size = 0;
        MemoryRegion* source = nullptr;  // pinned (StagTable::acquire) when size > 0
        uint64_t source_to = 0;
    };

    // What the TX is in the middle of.
    enum class TxMessage : uint8_t { none, sq, read_response, rtr, terminate };

    struct TxSlot {
        wire::FpduGather gather;
        size_t wire_length = 0;
        // action when this FPDU has fully left: complete the SQ WQE at sq index,
        // retire the IRD head, or mark the Terminate as sent.
        enum class Action : uint8_t { none, sq_sent, read_response_done, rtr_sent, terminate_sent } action =
            Action::none;
        uint64_t sq_index = 0;
        size_t iov_end = 0;  // index in iov just past this FPDU's iovecs
    };
    static constexpr size_t tx_slots = 16;
    static constexpr size_t tx_iov_capacity = 1024;
    // A batch ends at tx_slots FPDUs or tx_batch_bytes, whichever comes first
    // (on loopback's 64 KiB FPDUs: 16 FPDUs, about 1 MiB).  Against 512 KiB,
    // 1-4 MiB messages gained 2-5 % when the test host ran fast and 10-20 %
    // when it ran slowly; 2 MiB with 32 slots lost 5-10 % (docs/performance.md).
    static constexpr size_t tx_batch_bytes = 1024 * 1024;
    static constexpr size_t tx_engine_budget = 2 * 1024 * 1024;  // per EPOLLOUT round

    // Allocates the ring for `cap` (QP creation): posting never allocates.
    void init(const QpCap& cap);
    // The SQ slot of WQE number `index` (a running count: the ring wraps).
    SendWqe& wqe(uint64_t index) { return sq[index % sq.size()]; }
    // ORQ: the oldest Read / Atomic awaiting its response, a new one, retiring it.
    SendWqe& orq_front() { return wqe(orq[orq_head % orq.size()]); }
    void orq_push(uint64_t sq_index)
    {
        orq[(orq_head + orq_count) % orq.size()] = sq_index;
        ++orq_count;
    }
    void orq_pop()
    {
        orq_head = (orq_head + 1) % orq.size();
        --orq_count;
    }
    // IRQ: the job `i` places after the oldest.
    ReadResponseJob& irq_at(uint32_t i) { return irq[(irq_head + i) % irq.size()]; }
    // The batch is empty: nothing framed waits for sendmsg.
    void reset_batch()
    {
        slot_first = slot_count = iov_first = iov_count = 0;
        slot_sent_bytes = batch_bytes = 0;
    }

    std::vector<SendWqe> sq;
    std::vector<Sge> sq_sge;
    std::vector<uint64_t> sq_sge_host_delta;
    std::vector<uint8_t> sq_inline;
    uint32_t max_send_sge = 0;
    uint32_t max_inline = 0;
    uint64_t sq_head = 0;   // oldest not completed
    uint64_t sq_tx = 0;     // next to start transmitting
    uint64_t sq_tail = 0;   // next free
    // ORQ: SQ indexes of Reads whose Request went out, oldest first.
    std::array<uint64_t, 128> orq{};
    uint32_t orq_head = 0, orq_count = 0;
    // IRQ: inbound Read Requests to answer, oldest first.
    std::array<ReadResponseJob, 128> irq{};
    uint32_t irq_head = 0, irq_count = 0;
    uint32_t irq_built = 0;          // jobs at the IRQ head fully framed, awaiting retirement
    uint32_t msn[4] = {1, 1, 1, 1};  // next MSN per QN (Send, Read/Atomic Request, Terminate, Atomic Response)
    // atomics.cpp: the operands of the Atomic Requests in irq, by index;
    // allocated at a QP's first Atomic Request (none cost nothing).
    std::unique_ptr<AtomicOperands[]> atomic_ops;

    // TX message in progress + batch
    TxMessage msg = TxMessage::none;
    uint64_t offset = 0;          // payload octets of the current message already framed
    bool imm_next = false;        // rdma_write_with_imm: Write framed, Immediate Data next
    std::array<TxSlot, tx_slots> slots{};
    size_t slot_first = 0, slot_count = 0;
    std::array<iovec, tx_iov_capacity> iov;  // not zeroed (16 KiB): only [iov_first, +iov_count) is ever read
    size_t iov_first = 0, iov_count = 0;   // unsent part of the batch
    size_t batch_bytes = 0;
    size_t slot_sent_bytes = 0;      // octets of slots[slot_first] already written
    uint32_t stream_offset = 0;
    bool terminate_pending = false;
    bool terminate_sent = false;
    bool terminate_in_batch = false;
    std::array<uint8_t, wire::terminate_ulpdu_max_size + 8> terminate_ulpdu{};
    size_t terminate_len = 0;
    std::array<uint8_t, 64> control_ulpdu{};  // RTR
    size_t control_len = 0;
    bool prefer_irq = true;

    std::atomic<bool> backlog{false};  // mirror of QueuePair::epollout_ for lock-free checks
    // The socket refused more (EAGAIN or a partial write): only the
    // engine's EPOLLOUT, not a polling thread, tries again.
    std::atomic<bool> window_closed{false};
    // local_peer.cpp: stream octets sent since attach, from the first FPDU octet.
    uint64_t stream_sent = 0;
};

inline void SendPath::init(const QpCap& cap)
{
    sq.resize(cap.max_send_wr);
    max_send_sge = cap.max_send_sge;
    max_inline = cap.max_inline_data;
    sq_sge.resize(static_cast<size_t>(cap.max_send_wr) * max_send_sge);
    sq_sge_host_delta.resize(sq_sge.size());
    sq_inline.resize(static_cast<size_t>(cap.max_send_wr) * max_inline);
    for (size_t i = 0; i < sq.size(); ++i) {
        sq[i].sge = &sq_sge[i * max_send_sge];
        sq[i].host_delta = &sq_sge_host_delta[i * max_send_sge];
        sq[i].inline_buf = max_inline ? &sq_inline[i * max_inline] : nullptr;
    }
}

}  // namespace iwemu
