// Text forms of decoded MPA / DDP / RDMAP units (see segment_format.h).
#include "tools/segment_format.h"

#include <cstdarg>
#include <cstdio>

#include "emulator/wire/rdmap_ext.h"
#include "emulator/wire/rdmap_opcode.h"
#include "emulator/wire/read_request.h"

namespace iwemu::tools {

std::string strprintf(const char* fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    char small[256];
    va_list ap2;
    va_copy(ap2, ap);
    const int n = std::vsnprintf(small, sizeof small, fmt, ap);
    va_end(ap);
    std::string s;
    if (n < 0) {
        va_end(ap2);
        return s;
    }
    if (static_cast<size_t>(n) < sizeof small) {
        s.assign(small, static_cast<size_t>(n));
    } else {
        s.resize(static_cast<size_t>(n) + 1);
        std::vsnprintf(s.data(), s.size(), fmt, ap2);
        s.resize(static_cast<size_t>(n));
    }
    va_end(ap2);
    return s;
}

std::string format_octets(std::span<const uint8_t> octets)
{
    bool printable = !octets.empty();
    for (uint8_t c : octets)
        printable = printable && c >= 0x20 && c < 0x7F && c != '"' && c != '\\';
    if (printable)
        return "\"" + std::string(octets.begin(), octets.end()) + "\"";
    std::string s;
    for (size_t i = 0; i < octets.size(); ++i)
        s += strprintf(i ? ":%02x" : "%02x", octets[i]);
    return s.empty() ? "-" : s;
}

std::string format_mpa_frame(const wire::MpaFrame& f)
{
    const char* type = f.type == wire::MpaFrameType::request ? "request"
                       : f.type == wire::MpaFrameType::reply ? "reply"
                                                              : "rtr";
    std::string s = strprintf("%s rev=%u M=%d C=%d R=%d S=%d res=0x%x pd_length=%zu", type, f.rev, f.marker, f.crc,
                              f.reject, f.s, f.res, f.pd_length());
    if (f.type == wire::MpaFrameType::rtr)
        s += f.rtr_key_as_named ? " key=\"MPA ID Rtr Frame\"(as named)" : " key=\"MPA ID RtR Frame\"(as printed)";
    if (f.enhanced) {
        const wire::MpaEnhancedData& e = *f.enhanced;
        s += strprintf(" enhanced A=%d B=%d IRD=%u C=%d D=%d ORD=%u", e.peer_to_peer, e.zero_length_send_rtr, e.ird,
                       e.zero_length_write_rtr, e.zero_length_read_rtr, e.ord);
        s += e.peer_to_peer ? " (peer-to-peer)" : " (client-server)";
    }
    if (!f.private_data.empty())
        s += " pd=" + format_octets(f.private_data);
    return s;
}

std::string format_ddp_header(const wire::DdpHeader& h)
{
    std::string s = strprintf("T=%d L=%d DV=%u", h.control.tagged, h.control.last, h.control.dv);
    if (h.control.rsvd)
        s += strprintf(" Rsvd=0x%x", h.control.rsvd);
    if (h.control.tagged)
        s += strprintf(" STag=0x%08x TO=0x%llx", h.stag, static_cast<unsigned long long>(h.to));
    else
        s += strprintf(" QN=%u MSN=%u MO=%u", h.qn, h.msn, h.mo);
    return s;
}

std::string format_terminate_code(wire::TerminateCode c)
{
    return strprintf("layer=%u etype=%u code=0x%02x (%.*s)", static_cast<unsigned>(c.layer), c.etype, c.error_code,
                     static_cast<int>(wire::terminate_code_name(c).size()), wire::terminate_code_name(c).data());
}

std::string format_terminate_message(const wire::TerminateMessage& t)
{
    std::string s = format_terminate_code(t.control.code);
    s += strprintf(" M=%d D=%d R=%d", t.control.m, t.control.d, t.control.r);
    if (t.layout == wire::TerminateLayout::linux_siw_bitfield)
        s += " layout=linux-siw-bitfield (control word not as RFC 5040 draws it)";
    else if (t.layout_ambiguous)
        s += " layout=rfc5040?";
    if (t.status == wire::TerminateDecodeStatus::inconsistent)
        s += " (unregistered code or reserved bits set)";
    if (t.status == wire::TerminateDecodeStatus::too_short)
        s += " (headers announced by HdrCt missing)";
    if (t.control.d) {
        s += strprintf(" ddp_segment_length=%u%s", t.ddp_segment_length, t.control.m ? "" : "(invalid)");
        if (t.terminated_ddp_header) {
            s += " terminated_ddp=[" + format_ddp_header(*t.terminated_ddp_header);
            const auto rdmap = wire::decode_rdmap_control(t.terminated_ddp_header->rsvdulp0);
            const auto name = wire::rdmap_opcode_name(rdmap.opcode);
            s += strprintf(" opcode=0x%x (%.*s)]", rdmap.opcode, static_cast<int>(name.size()), name.data());
        }
    }
    if (t.terminated_rdma_header) {
        const auto& r = *t.terminated_rdma_header;
        s += strprintf(" terminated_rdma=[sink_stag=0x%08x sink_to=0x%llx size=%u source_stag=0x%08x source_to=0x%llx]",
                       r.data_sink_stag, static_cast<unsigned long long>(r.data_sink_to), r.rdma_read_message_size,
                       r.data_source_stag, static_cast<unsigned long long>(r.data_source_to));
    }
    return s;
}

std::string format_rdmap(const wire::DdpHeader& h, std::span<const uint8_t> body, size_t body_length)
{
    using wire::RdmapOpcode;
    const wire::RdmapControl c = wire::decode_rdmap_control(h.rsvdulp0);
    const auto name = wire::rdmap_opcode_name(c.opcode);
    std::string s = strprintf("RV=%u opcode=0x%x (%.*s)", c.rv, c.opcode, static_cast<int>(name.size()), name.data());
    if (c.rsvd)
        s += strprintf(" Rsv=0x%x", c.rsvd);
    if (!h.control.tagged && wire::rdmap_opcode_carries_invalidate_stag(c.opcode))
        s += strprintf(" invalidate_stag=0x%08x", h.rsvdulp1);

    const auto info = wire::rdmap_opcode_info(c.opcode);
    switch (static_cast<RdmapOpcode>(c.opcode)) {
    case RdmapOpcode::rdma_read_request:
        if (auto r = wire::decode_read_request(body))
            s += strprintf(" sink_stag=0x%08x sink_to=0x%llx size=%u source_stag=0x%08x source_to=0x%llx",
                           r->data_sink_stag, static_cast<unsigned long long>(r->data_sink_to),
                           r->rdma_read_message_size, r->data_source_stag,
                           static_cast<unsigned long long>(r->data_source_to));
        break;
    case RdmapOpcode::terminate:
        // body holds at most the first 64 octets; a Terminate header is <= 52.
        s += " term=[" +
             format_terminate_message(wire::decode_terminate(body.first(std::min(body.size(), body_length)))) + "]";
        break;
    case RdmapOpcode::immediate_data:
    case RdmapOpcode::immediate_data_with_se:
        if (auto d = wire::decode_immediate_data(body))
            s += " immediate_data=" + format_octets(std::span<const uint8_t>(d->data));
        break;
    case RdmapOpcode::atomic_request:
        if (auto a = wire::decode_atomic_request(body))
            s += strprintf(" aopcode=%u (%s) request_id=0x%x remote_stag=0x%08x remote_to=0x%llx"
                           " add_swap_data=0x%llx add_swap_mask=0x%llx compare_data=0x%llx compare_mask=0x%llx",
                           a->aopcode,
                           a->aopcode == 0   ? "FetchAdd"
                           : a->aopcode == 2 ? "CmpSwap"
                                             : "reserved",
                           a->request_identifier, a->remote_stag, static_cast<unsigned long long>(a->remote_to),
                           static_cast<unsigned long long>(a->add_or_swap_data),
                           static_cast<unsigned long long>(a->add_or_swap_mask),
                           static_cast<unsigned long long>(a->compare_data),
                           static_cast<unsigned long long>(a->compare_mask));
        break;
    case RdmapOpcode::atomic_response:
        if (auto a = wire::decode_atomic_response(body))
            s += strprintf(" original_request_id=0x%x original_value=0x%llx", a->original_request_identifier,
                           static_cast<unsigned long long>(a->original_remote_data_value));
        break;
    default:
        break;
    }
    const size_t header = info ? info->rdmap_header : 0;
    if (!info || !info->fixed_length) {
        if (c.opcode != static_cast<uint8_t>(RdmapOpcode::terminate))
            s += strprintf(" payload=%zu", body_length >= header ? body_length - header : 0);
    }
    return s;
}

}  // namespace iwemu::tools
