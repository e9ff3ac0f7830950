// RDMAP Terminate message codec and builder, RFC 5040 §4.8, §7.1.
#include "emulator/wire/terminate_message.h"

#include <algorithm>

#include "emulator/wire/network_order.h"
#include "emulator/wire/rdmap_opcode.h"

namespace iwemu::wire {

void encode_terminate_control(const TerminateControl& c, std::span<uint8_t, terminate_control_size> out,
                              TerminateLayout layout)
{
    const auto layer = static_cast<uint8_t>(static_cast<uint8_t>(c.code.layer) & 0xF);
    const auto et = static_cast<uint8_t>(c.code.etype & 0xF);
    out[1] = c.code.error_code;
    if (layout == TerminateLayout::rfc5040) {
        // Layer(4) EType(4) | Error Code | M D R Reserved(13), bit 0 = MSB.
        out[0] = static_cast<uint8_t>(layer << 4 | et);
        out[2] = static_cast<uint8_t>((c.m ? terminate_hdrct_m : 0) | (c.d ? terminate_hdrct_d : 0) |
                                      (c.r ? terminate_hdrct_r : 0) | ((c.reserved >> 8) & 0x1F));
        out[3] = static_cast<uint8_t>(c.reserved);
    } else {
        // Little-endian bitfields: fields fill each octet from its low bit.
        out[0] = static_cast<uint8_t>(et << 4 | layer);
        out[2] = static_cast<uint8_t>((c.m ? 0x01 : 0) | (c.d ? 0x02 : 0) | (c.r ? 0x04 : 0) |
                                      ((c.reserved << 3) & 0xF8));
        out[3] = static_cast<uint8_t>(c.reserved >> 5);
    }
}

TerminateControl decode_terminate_control(std::span<const uint8_t, terminate_control_size> in,
                                          TerminateLayout layout)
{
    TerminateControl c;
    c.code.error_code = in[1];
    if (layout == TerminateLayout::rfc5040) {
        c.code.layer = static_cast<TerminateLayer>(in[0] >> 4);
        c.code.etype = in[0] & 0xF;
        c.m = in[2] & terminate_hdrct_m;
        c.d = in[2] & terminate_hdrct_d;
        c.r = in[2] & terminate_hdrct_r;
        c.reserved = static_cast<uint16_t>((in[2] & 0x1F) << 8 | in[3]);
    } else {
        c.code.layer = static_cast<TerminateLayer>(in[0] & 0xF);
        c.code.etype = in[0] >> 4;
        c.m = in[2] & 0x01;
        c.d = in[2] & 0x02;
        c.r = in[2] & 0x04;
        c.reserved = static_cast<uint16_t>(in[2] >> 3 | in[3] << 5);
    }
    return c;
}

namespace {

// Octets the Terminate header needs for the given HdrCt; 0 when even the
// terminated DDP header's first octet (which sets its size) is missing.
size_t terminate_needed(const TerminateControl& c, std::span<const uint8_t> body)
{
    size_t n = terminate_control_size;
    if (c.d) {
        if (body.size() <= n + 2)
            return 0;
        n += 2 + ddp_header_size(body[n + 2]);
    }
    if (c.r)
        n += rdma_read_request_header_size;
    return n;
}

bool consistent(const TerminateControl& c, std::span<const uint8_t> body)
{
    const size_t need = terminate_needed(c, body);
    return terminate_code_defined(c.code) && c.reserved == 0 && need != 0 && need <= body.size();
}

}  // namespace

TerminateMessage decode_terminate(std::span<const uint8_t> body)
{
    TerminateMessage m;
    if (body.size() < terminate_control_size)
        return m;
    const auto word = body.first<terminate_control_size>();
    const TerminateControl rfc = decode_terminate_control(word, TerminateLayout::rfc5040);
    const TerminateControl siw = decode_terminate_control(word, TerminateLayout::linux_siw_bitfield);
    const bool rfc_ok = consistent(rfc, body);
    const bool siw_ok = consistent(siw, body);

    m.status = TerminateDecodeStatus::ok;
    m.control = rfc;
    if (rfc_ok) {
        m.layout_ambiguous = siw_ok && siw != rfc;
    } else if (siw_ok) {
        m.layout = TerminateLayout::linux_siw_bitfield;
        m.control = siw;
    } else {
        m.status = TerminateDecodeStatus::inconsistent;
    }

    const size_t need = terminate_needed(m.control, body);
    if (need == 0 || need > body.size()) {
        m.status = TerminateDecodeStatus::too_short;
        m.size = terminate_control_size;
        return m;
    }
    size_t off = terminate_control_size;
    if (m.control.d) {
        m.ddp_segment_length = be::load16(body.data() + off);
        off += 2;
        const size_t hdr = ddp_header_size(body[off]);
        m.terminated_ddp_octets = body.subspan(off, hdr);
        m.terminated_ddp_header = decode_ddp_header(m.terminated_ddp_octets);
        off += hdr;
    }
    if (m.control.r) {
        m.terminated_rdma_header = decode_read_request(body.subspan(off));
        off += rdma_read_request_header_size;
    }
    m.size = off;
    return m;
}

TerminateHeaders terminate_headers_for(TerminateCode code, std::optional<uint8_t> offending_opcode)
{
    switch (code.layer) {
    case TerminateLayer::rdmap:
        if (code.etype == etype::rdmap_remote_protection)
            return {true, offending_opcode == static_cast<uint8_t>(RdmapOpcode::rdma_read_request)};
        if (code.etype == etype::rdmap_remote_operation)
            return {true, false};
        return {};  // local catastrophic
    case TerminateLayer::ddp:
        return {true, false};
    case TerminateLayer::llp:
        return {};
    }
    return {};
}

size_t build_terminate_ulpdu(const TerminateCause& cause, uint32_t msn, std::span<uint8_t> out)
{
    const std::span<const uint8_t> seg = cause.offending_ulpdu;
    std::optional<uint8_t> opcode;
    if (seg.size() >= 2)
        opcode = decode_rdmap_control(seg[1]).opcode;
    const TerminateHeaders want = terminate_headers_for(cause.code, opcode);

    // "if possible": only the octets we were given can be echoed.
    const size_t ddp_len = seg.empty() ? 0 : ddp_header_size(seg[0]);
    const bool d = want.ddp && !seg.empty() && seg.size() >= ddp_len;
    const bool r = want.rdma && d && ddp_len == ddp_untagged_header_size &&
                   seg.size() >= ddp_untagged_header_size + rdma_read_request_header_size;

    const size_t total = terminate_ulpdu_min_size + (d ? 2 + ddp_len : 0) + (r ? rdma_read_request_header_size : 0);
    if (out.size() < total)
        return 0;

    DdpHeader h;
    h.control = DdpControl{false, true, 0, ddp_version};
    h.rsvdulp0 = encode_rdmap_control(RdmapOpcode::terminate);
    h.qn = rdmap_qn_terminate;
    h.msn = msn;
    h.mo = 0;
    size_t off = encode_ddp_header(h, out);

    TerminateControl c;
    c.code = cause.code;
    c.d = d;
    c.m = d && cause.ddp_segment_length.has_value();
    c.r = r;
    encode_terminate_control(c, out.subspan(off).first<terminate_control_size>());
    off += terminate_control_size;

    if (d) {
        be::store16(out.data() + off, c.m ? *cause.ddp_segment_length : 0);
        off += 2;
        std::copy_n(seg.data(), ddp_len, out.data() + off);
        off += ddp_len;
    }
    if (r) {
        std::copy_n(seg.data() + ddp_untagged_header_size, rdma_read_request_header_size, out.data() + off);
        off += rdma_read_request_header_size;
    }
    return off;
}

}  // namespace iwemu::wire
