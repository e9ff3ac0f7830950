// RFC 7306 Immediate Data on a QP: verbs "RDMA Write with Immediate".
//
// Mapping (CHECKLIST decision 10, EXT-003):
//   IBV_WR_RDMA_WRITE_WITH_IMM = one SQ WQE sent as an RDMA Write (RFC 5040
//   §4.3, zero-length included) immediately followed by an Immediate Data
//   message (RFC 7306 §6.2; with Solicited Event when IBV_SEND_SOLICITED).
//   Nothing else is framed in between, and the WQE completes, as
//   IBV_WC_RDMA_WRITE, once the Immediate Data has left (RFC 5040 §5.5
//   rule 18).  At the Data Sink the Immediate Data is an untagged QN-0
//   message: it carries the next Send MSN and consumes one receive WQE (RQ or
//   SRQ), which completes as IBV_WC_RECV_RDMA_WITH_IMM with IBV_WC_WITH_IMM,
//   imm_data from octets 0..3 of the field (wire/immediate_data.h), and
//   byte_len = length of the RDMA Write message that preceded it (what
//   InfiniBand reports for Write with Immediate; 0 when no Write preceded).
//   Ordering: §6.3 gives Immediate Data the Send rules, so the Write's data
//   is placed before the completion appears.  The receive WQE's buffers are
//   not written: verbs hands immediate data over in the completion only, and
//   Write-with-Immediate receivers commonly post zero-length receives.
//
// IBV_WR_SEND_WITH_IMM stays unsupported (EOPNOTSUPP): RFC 7306 has no
// message that carries a Send payload and immediate data into one receive
// buffer.  A Send followed by Immediate Data consumes two receive WQEs where
// verbs consumes one, and a lone Immediate Data cannot be told apart from the
// tail of a Write with Immediate at the receiver.
#include "emulator/qp/qp.h"
#include "emulator/wire/immediate_data.h"

namespace iwemu {

using wire::TerminateLayer;

// ---------------------------------------------------------------- send ----

// The second half of a Write with Immediate; the Write itself went out as
// the preceding segments of the same SQ message (tx_build_sq_segment_locked).
bool QueuePair::tx_build_immediate_data_locked(SendWqe& w)
{
    const wire::ImmediateDataMessage m{(w.flags & send_solicited) != 0, tx_.msn[0],
                                       wire::immediate_data_from_imm32(w.imm_data)};
    uint8_t ulpdu[wire::immediate_data_ulpdu_size];
    const size_t n = wire::encode_immediate_data_message(m, ulpdu);
    if (!tx_add_fpdu_locked({ulpdu, n}, {}, TxSlot::Action::sq_sent, tx_.sq_tx))
        return false;
    ++tx_.msn[0];  // shares the Send sequence (RFC 7306 §6.2)
    tx_.imm_next = false;
    tx_.msg = TxMessage::none;
    tx_.offset = 0;
    ++tx_.sq_tx;
    return true;
}

// ------------------------------------------------------------- receive ----

void QueuePair::rx_count_write_octets(uint32_t len, bool last)
{
    rx_.write_len = (rx_.write_open ? rx_.write_len : 0) + len;
    rx_.write_open = !last;
}

// Header of an Immediate Data segment, validated statelessly (exactly 8
// octets, QN 0, L = 1: validate_rdmap_segment) and then like a Send's first
// segment by rx_place_send: MSN, one receive WQE taken from the RQ or SRQ
// (or, with none posted, the Send's error path: DDP 1/2/02 Terminate).  The
// WQE is held like a Send's until the segment ends with a good CRC; an error
// before that flushes it (flush_rq).
bool QueuePair::rx_accept_immediate_data()
{
    rx_.target = RxTarget::control;  // the 8 octets land after the DDP header in rx_.control
    return true;
}

// Immediate Data while a multi-segment Send is still incomplete: QN-0
// messages do not interleave, so the opcode changed inside one message.
bool QueuePair::rx_reject_immediate_data_inside_send()
{
    rx_fail({TerminateLayer::rdmap, wire::etype::rdmap_remote_operation, wire::ecode::rdmap_unexpected_opcode},
            {rx_.control.data(), rx_.control_len}, rx_.ulen, AsyncEventType::qp_fatal, WcStatus::success);
    return false;
}

void QueuePair::rx_deliver_immediate_data()
{
    const auto data = wire::decode_immediate_data(
        std::span<const uint8_t>(rx_.control.data() + rx_.control_len, wire::immediate_data_size));
    Completion c;
    c.wr_id = rx_.wqe.wr_id;
    c.opcode = WcOpcode::recv_rdma_with_imm;
    c.byte_len = static_cast<uint32_t>(rx_.write_len);
    c.wc_flags = wc_with_imm;
    c.imm_data_or_inv_rkey = data ? wire::imm32_from_immediate_data(*data) : 0;
    c.qp_num = qp_num_;
    c.src_qp = qp_num_;
    rx_.write_len = 0;
    rx_.write_open = false;
    rx_.send_active = false;
    ++rx_.msn[0];
    complete(init_.recv_cq, c, static_cast<wire::RdmapOpcode>(rx_.opcode) == wire::RdmapOpcode::immediate_data_with_se);
}

}  // namespace iwemu
