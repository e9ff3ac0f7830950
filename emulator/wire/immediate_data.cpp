// RFC 7306 §6.2 Immediate Data message codec.
#include "emulator/wire/immediate_data.h"

#include "emulator/wire/network_order.h"
#include "emulator/wire/rdmap_message.h"

namespace iwemu::wire {

ImmediateData immediate_data_from_imm32(uint32_t imm)
{
    ImmediateData d;  // octets 4..7 stay 0
    be::store32(d.data.data() + immediate_data_imm32_offset, imm);
    return d;
}

uint32_t imm32_from_immediate_data(const ImmediateData& data)
{
    return be::load32(data.data.data() + immediate_data_imm32_offset);
}

size_t encode_immediate_data_message(const ImmediateDataMessage& m, std::span<uint8_t> out)
{
    if (out.size() < immediate_data_ulpdu_size)
        return 0;
    const RdmapOpcode op = m.solicited_event ? RdmapOpcode::immediate_data_with_se : RdmapOpcode::immediate_data;
    const DdpHeader h = rdmap_untagged_header(op, true, m.msn, 0);
    const size_t n = encode_ddp_header(h, out);
    return n + encode_immediate_data(m.data, out.subspan(n));
}

std::optional<ImmediateDataMessage> decode_immediate_data_message(std::span<const uint8_t> ulpdu)
{
    if (ulpdu.size() != immediate_data_ulpdu_size)
        return std::nullopt;
    const std::optional<RdmapSegment> seg = decode_rdmap_segment(ulpdu);
    if (!seg || seg->ddp.control.tagged || !seg->ddp.control.last || seg->ddp.qn != rdmap_qn_send ||
        seg->ddp.mo != 0 || seg->rdmap.rv != rdmap_version)
        return std::nullopt;
    const auto op = static_cast<RdmapOpcode>(seg->rdmap.opcode);
    if (op != RdmapOpcode::immediate_data && op != RdmapOpcode::immediate_data_with_se)
        return std::nullopt;
    const std::optional<ImmediateData> d = decode_immediate_data(seg->body);
    if (!d)
        return std::nullopt;
    return ImmediateDataMessage{op == RdmapOpcode::immediate_data_with_se, seg->ddp.msn, *d};
}

}  // namespace iwemu::wire
