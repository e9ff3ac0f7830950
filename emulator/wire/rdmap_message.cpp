// RDMAP segment decode and stateless receive validation, RFC 5040 §4.1, §7.2.
#include "emulator/wire/rdmap_message.h"

namespace iwemu::wire {

std::optional<RdmapSegment> decode_rdmap_segment(std::span<const uint8_t> ulpdu)
{
    const std::optional<DdpHeader> ddp = decode_ddp_header(ulpdu);
    if (!ddp)
        return std::nullopt;
    return RdmapSegment{*ddp, decode_rdmap_control(ddp->rsvdulp0), ulpdu.subspan(ddp->size())};
}

std::optional<TerminateCode> validate_rdmap_segment(const DdpHeader& ddp, size_t ulpdu_length,
                                                    RdmapRxOptions options)
{
    constexpr TerminateCode unexpected_opcode{TerminateLayer::rdmap, etype::rdmap_remote_operation,
                                              ecode::rdmap_unexpected_opcode};

    if (auto bad = check_ddp_version(ddp.control, options.version))
        return bad;

    const RdmapControl rdmap = decode_rdmap_control(ddp.rsvdulp0);
    if (rdmap.rv != options.version)
        return TerminateCode{TerminateLayer::rdmap, etype::rdmap_remote_operation, ecode::rdmap_invalid_rdmap_version};

    const std::optional<RdmapOpcodeInfo> info = rdmap_opcode_info(rdmap.opcode);
    if (!info || (info->rfc7306 && !options.rfc7306))
        return unexpected_opcode;
    if (info->tagged != ddp.control.tagged)
        return unexpected_opcode;
    if (!ddp.control.tagged && ddp.qn != info->qn)
        return TerminateCode{TerminateLayer::ddp, etype::ddp_untagged_buffer, ecode::ddp_untagged_invalid_qn};

    const size_t fixed = ddp.size() + info->rdmap_header;
    if ((info->fixed_length && ulpdu_length != fixed) || ulpdu_length < fixed)
        return TerminateCode{TerminateLayer::rdmap, etype::rdmap_remote_operation, ecode::rdmap_unspecified};
    return std::nullopt;
}

}  // namespace iwemu::wire
