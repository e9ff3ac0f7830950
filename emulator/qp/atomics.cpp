// RFC 7306 Atomic Operations on a QP: verbs IBV_WR_ATOMIC_FETCH_AND_ADD and
// IBV_WR_ATOMIC_CMP_AND_SWP (CHECKLIST EXT-004 … EXT-011).
//
// Requester: the WR goes out as one Atomic Request (untagged, QN 1, the Read
// Request MSN sequence, Request Identifier = that MSN) and joins the ORQ
// behind the Reads before it, counted against ORD like them.  The matching
// Atomic Response (QN 3, its own MSN sequence) comes in request order with
// the Read Responses; its Original Remote Data Value is written in host
// order into the WR's 8-octet local buffer, and the WR completes as
// IBV_WC_COMP_SWAP / IBV_WC_FETCH_ADD with byte_len 8.
//
// Responder: an Atomic Request is checked when it arrives (AOpCode, the QP's
// REMOTE_ATOMIC right, the STag's PD, right and bounds for 8 octets, TO
// alignment) and queued in the IRQ with the Read Requests (IRD counts both).
// The operation is performed when the TX reaches it: after every earlier
// Read Response has been handed to TCP (those read the memory only when
// sendmsg() copies it, so an earlier Read never sees the atomic's result)
// and before any later one is framed.  Errors end in a Terminate carrying
// the DDP header (RFC 7306 §8): 0/2/06 for an AOpCode other than FetchAdd
// and CmpSwap (decision 12: 1 is reserved), Remote Protection 0/1/xx as for
// a Read's source STag, 0/2/07 for a TO not 64-bit aligned (§5.1, EXT-008).
#include <cstring>
#include <mutex>
#include <new>

#include "emulator/emulator.h"
#include "emulator/base/log.h"
#include "emulator/odp_memory.h"
#include "emulator/qp/qp.h"
#include "emulator/qp/stag_terminate.h"
#include "emulator/stack_batch.h"
#include "emulator/wire/ddp_header.h"
#include "emulator/wire/rdmap_message.h"

namespace iwemu {

namespace {

using wire::TerminateCode;
using wire::TerminateLayer;
namespace et = wire::etype;
namespace ec = wire::ecode;

using stag_terminate::rdmap_op;
using stag_terminate::rdmap_prot;

constexpr size_t atomic_request_ulpdu_size = wire::ddp_untagged_header_size + wire::atomic_request_header_size;
constexpr size_t atomic_response_ulpdu_size = wire::ddp_untagged_header_size + wire::atomic_response_header_size;

// Words at unaligned host addresses: one of these locks, by address.
std::mutex& unaligned_word_lock(const uint8_t* word)
{
    static std::mutex locks[64];
    return locks[(reinterpret_cast<uintptr_t>(word) >> 3) % std::size(locks)];
}

}  // namespace

uint64_t apply_atomic(uint8_t* word, const AtomicOperands& op)
{
    if (reinterpret_cast<uintptr_t>(word) % alignof(uint64_t) != 0) {
        std::lock_guard<std::mutex> g(unaligned_word_lock(word));
        uint64_t old;
        std::memcpy(&old, word, sizeof old);
        const uint64_t next = atomic_result(old, op);
        if (next != old) std::memcpy(word, &next, sizeof next);
        return old;
    }
    auto* p = reinterpret_cast<uint64_t*>(word);
    if (op.aopcode == static_cast<uint8_t>(wire::AtomicOpcode::fetch_add) && op.add_or_swap_mask == 0)
        return __atomic_fetch_add(p, op.add_or_swap, __ATOMIC_SEQ_CST);
    uint64_t old = __atomic_load_n(p, __ATOMIC_SEQ_CST);
    for (;;) {
        const uint64_t next = atomic_result(old, op);
        if (next == old) return old;  // a failed compare writes nothing; the load was the operation
        if (__atomic_compare_exchange_n(p, &old, next, false, __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST)) return old;
    }
}

// ---------------------------------------------------------------- requester

// sq_lock_ held; w passed the ORD, fence and local buffer checks
// (tx_build_sq_segment_locked).  Its operands wait in the WQE's inline
// buffer, which an atomic's 8-octet result buffer never uses (post_send_locked).
bool QueuePair::tx_build_atomic_request_locked(SendWqe& w)
{
    uint64_t compare_add, swap;
    std::memcpy(&compare_add, w.inline_buf, sizeof compare_add);
    std::memcpy(&swap, w.inline_buf + sizeof compare_add, sizeof swap);
    const AtomicOperands op = w.opcode == WrOpcode::atomic_cmp_and_swp ? verbs_compare_swap(compare_add, swap)
                                                                       : verbs_fetch_add(compare_add);
    const uint32_t msn = tx_.msn[1];
    uint8_t ulpdu[atomic_request_ulpdu_size];
    const wire::DdpHeader h = wire::rdmap_untagged_header(wire::RdmapOpcode::atomic_request, true, msn, 0);
    size_t n = wire::encode_ddp_header(h, ulpdu);
    wire::AtomicRequestHeader a;
    a.aopcode = op.aopcode;
    a.request_identifier = msn;  // unique among the outstanding ones; the response echoes it
    a.remote_stag = w.rkey;
    a.remote_to = w.remote_addr;
    a.add_or_swap_data = op.add_or_swap;
    a.add_or_swap_mask = op.add_or_swap_mask;
    a.compare_data = op.compare;
    a.compare_mask = op.compare_mask;
    n += wire::encode_atomic_request(a, std::span<uint8_t>(ulpdu + n, sizeof ulpdu - n));
    if (!tx_add_fpdu_locked({ulpdu, n}, {}, TxSlot::Action::sq_sent, tx_.sq_tx)) return false;
    w.atomic_id = msn;
    ++tx_.msn[1];  // shares the Read Request sequence (RFC 7306 §5.2)
    tx_.orq_push(tx_.sq_tx);
    tx_.msg = TxMessage::none;
    tx_.offset = 0;
    ++tx_.sq_tx;
    return true;
}

// rx_lock_ held; rx_on_segment_header checked the QN-3 MSN and collected
// the 12 header octets after the DDP header.
bool QueuePair::rx_handle_atomic_response()
{
    const auto resp = wire::decode_atomic_response(
        std::span<const uint8_t>(rx_.control.data() + rx_.control_len, wire::atomic_response_header_size));
    const std::span<const uint8_t> offending{rx_.control.data(), rx_.control_len};
    TerminateCode err{};
    bool fail = false, local_fault = false;
    {
        std::lock_guard<std::mutex> g(sq_lock_);
        SendWqe* w = tx_.orq_count ? &tx_.orq_front() : nullptr;
        if (!w || !is_atomic(w->opcode)) {
            err = rdmap_op(ec::rdmap_unexpected_opcode);  // a Response nobody asked for, or a Read's turn
            fail = true;
        } else if (!resp || resp->original_request_identifier != w->atomic_id) {
            err = rdmap_op(ec::rdmap_unspecified);  // not the answer to our request (decision 7)
            fail = true;
        } else {
            // The original value, in host order, into the 8 local octets
            // (checked for LOCAL_WRITE when the request went out).
            const uint64_t value = resp->original_remote_data_value;
            const auto* src = reinterpret_cast<const uint8_t*>(&value);
            StackBatch<std::span<const uint8_t>, recv_wqe_max_sge + 1> storage;
            const int n = payload_slices(w->sge, w->host_delta, w->num_sge, 0, sizeof value, storage.items,
                                         static_cast<int>(std::size(storage.items)));
            const bool odp = w->flags & SendPath::wqe_odp_sink;
            for (int i = 0; i < n && !local_fault; ++i) {
                auto* dst = const_cast<uint8_t*>(storage.items[i].data());
                if (__builtin_expect(odp, 0))
                    local_fault = !odp_write(dst, src, storage.items[i].size());
                else
                    std::memcpy(dst, src, storage.items[i].size());
                src += storage.items[i].size();
            }
            if (local_fault) {
                // The result buffer lies in an ODP region and is not mapped
                // (writable) now: as a Read Response into such a sink
                // (rx_odp_fail), the WR keeps a local protection error.
                w->status = WcStatus::loc_prot_err;
            }
        }
        if (!fail && !local_fault) {
            ++rx_.msn[3];
            w->phase = WqePhase::done;
            tx_.orq_pop();
            sq_complete_in_order_locked();
            rx_.tx_kick = true;  // an ORD slot is free again
        }
    }
    if (local_fault) {
        IWEMU_LOG(info, "qp %u: ODP fault placing an atomic's original value", qp_num_);
        rx_fail({TerminateLayer::rdmap, et::rdmap_local_catastrophic, 0}, {}, std::nullopt, AsyncEventType::qp_fatal,
                WcStatus::loc_prot_err);
        return false;
    }
    if (fail) {
        rx_fail(err, offending, rx_.ulen, AsyncEventType::qp_fatal, WcStatus::success);
        return false;
    }
    return true;
}

// ---------------------------------------------------------------- responder

// rx_lock_ held; rx_on_segment_header checked the QN-1 MSN and collected
// the 52 header octets after the DDP header.
bool QueuePair::rx_handle_atomic_request()
{
    const auto req = wire::decode_atomic_request(
        std::span<const uint8_t>(rx_.control.data() + rx_.control_len, wire::atomic_request_header_size));
    // RFC 7306 §8: the Terminate carries the DDP header, not the RDMA one.
    const std::span<const uint8_t> offending{rx_.control.data(), rx_.control_len};
    auto fail = [&](const TerminateCode& code, AsyncEventType event) {
        rx_fail(code, offending, rx_.ulen, event, WcStatus::success);
        return false;
    };
    if (!req) return fail(rdmap_op(ec::rdmap_unspecified), AsyncEventType::qp_fatal);
    if (!atomic_opcode_supported(req->aopcode)) return fail(rdmap_op(ec::rdmap_unexpected_opcode), AsyncEventType::qp_fatal);
    // The QP's own right (ibv_modify_qp IBV_ACCESS_REMOTE_ATOMIC), as IB
    // responders check it, then the region's.
    if (!(access_flags_ & access_remote_atomic))
        return fail(rdmap_prot(ec::rdmap_access_rights_violation), AsyncEventType::qp_access_err);
    StagError e;
    MemoryRegion* target =
        emu_.stags().acquire(req->remote_stag, pd_, access_remote_atomic, req->remote_to, sizeof(uint64_t), &e,
                             stream_id_);
    if (!target) return fail(stag_terminate::for_rdmap_stag(e), AsyncEventType::qp_access_err);
    if (req->remote_to % sizeof(uint64_t) != 0) {
        StagTable::release(target);
        return fail(rdmap_op(ec::rdmap_catastrophic_localized), AsyncEventType::qp_fatal);  // §5.1, EXT-008
    }
    // An ODP target is faulted in for write now, so the operation (done in
    // place by the TX, apply_atomic) cannot fault; memory that is not mapped
    // writable is outside what the STag names now, as for a Read's source.
    if ((target->access() & access_on_demand) && !odp_writable(target->at(req->remote_to), sizeof(uint64_t))) {
        StagTable::release(target);
        return fail(stag_terminate::for_rdmap_stag(StagError::bounds), AsyncEventType::qp_access_err);
    }
    const AtomicOperands op{req->aopcode, req->add_or_swap_data, req->add_or_swap_mask, req->compare_data,
                            req->compare_mask};
    bool overflow = false, no_memory = false;
    {
        std::lock_guard<std::mutex> g(sq_lock_);
        if (tx_.irq_count >= conn_.ird || tx_.irq_count >= tx_.irq.size()) {
            overflow = true;  // RDMAP-023, as for a Read Request
        } else {
            if (!tx_.atomic_ops) tx_.atomic_ops.reset(new (std::nothrow) AtomicOperands[tx_.irq.size()]);
            if (!tx_.atomic_ops) {
                no_memory = true;
            } else {
                const uint32_t slot = (tx_.irq_head + tx_.irq_count) % tx_.irq.size();
                ReadResponseJob& j = tx_.irq[slot];
                j.atomic = true;
                j.performed = false;
                j.sink_stag = req->request_identifier;
                j.sink_to = 0;
                j.size = 0;
                j.source = target;
                j.source_to = req->remote_to;
                tx_.atomic_ops[slot] = op;
                ++tx_.irq_count;
                ++rx_.msn[1];
                rx_.tx_kick = true;  // performed and answered after this receive pass
            }
        }
    }
    if (overflow || no_memory) {
        StagTable::release(target);
        if (no_memory)
            return fail({TerminateLayer::rdmap, et::rdmap_local_catastrophic, 0}, AsyncEventType::qp_fatal);
        return fail({TerminateLayer::ddp, et::ddp_untagged_buffer, ec::ddp_untagged_invalid_msn_no_buffer},
                    AsyncEventType::qp_fatal);
    }
    return true;
}

// sq_lock_ held; j is the IRQ entry at tx_.irq_built (the next to frame).
bool QueuePair::tx_build_atomic_response_locked(ReadResponseJob& j)
{
    if (!j.performed) {
        // Earlier Read Responses framed but not yet taken by TCP still read
        // their source at sendmsg(): the operation waits until they left.
        // Earlier Atomic Responses carry their value in the FPDU header.
        for (uint32_t i = 0; i < tx_.irq_built; ++i) {
            const ReadResponseJob& e = tx_.irq_at(i);
            if (!e.atomic && e.size > 0) return false;
        }
        const AtomicOperands& op = tx_.atomic_ops[(tx_.irq_head + tx_.irq_built) % tx_.irq.size()];
        j.sink_to = apply_atomic(j.source->at(j.source_to), op);
        j.performed = true;
        StagTable::release(j.source);
        j.source = nullptr;
    }
    uint8_t ulpdu[atomic_response_ulpdu_size];
    const wire::DdpHeader h =
        wire::rdmap_untagged_header(wire::RdmapOpcode::atomic_response, true, tx_.msn[3], 0);
    size_t n = wire::encode_ddp_header(h, ulpdu);
    n += wire::encode_atomic_response({j.sink_stag, j.sink_to}, std::span<uint8_t>(ulpdu + n, sizeof ulpdu - n));
    if (!tx_add_fpdu_locked({ulpdu, n}, {}, TxSlot::Action::read_response_done, 0)) return false;
    ++tx_.msn[3];
    ++tx_.irq_built;
    return true;
}

}  // namespace iwemu
