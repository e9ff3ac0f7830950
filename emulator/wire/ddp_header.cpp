// DDP segment header codec, RFC 5041 §4.2 (tagged) and §4.3 (untagged).
#include "emulator/wire/ddp_header.h"

#include "emulator/wire/network_order.h"

namespace iwemu::wire {

std::optional<DdpHeader> decode_ddp_header(std::span<const uint8_t> ulpdu)
{
    if (ulpdu.empty() || ulpdu.size() < ddp_header_size(ulpdu[0]))
        return std::nullopt;
    const uint8_t* p = ulpdu.data();
    DdpHeader h;
    h.control = decode_ddp_control(p[0]);
    h.rsvdulp0 = p[1];
    if (h.control.tagged) {
        // ULPDU +2 STag (32), +6 TO (64): RFC 5041 §4.2.
        h.stag = be::load32(p + 2);
        h.to = be::load64(p + 6);
    } else {
        // ULPDU +2 RsvdULP[8:39], +6 QN, +10 MSN, +14 MO: RFC 5041 §4.3.
        h.rsvdulp1 = be::load32(p + 2);
        h.qn = be::load32(p + 6);
        h.msn = be::load32(p + 10);
        h.mo = be::load32(p + 14);
    }
    return h;
}

size_t encode_ddp_header(const DdpHeader& h, std::span<uint8_t> out)
{
    const size_t n = h.size();
    if (out.size() < n)
        return 0;
    uint8_t* p = out.data();
    p[0] = encode_ddp_control(h.control);
    p[1] = h.rsvdulp0;
    if (h.control.tagged) {
        be::store32(p + 2, h.stag);
        be::store64(p + 6, h.to);
    } else {
        be::store32(p + 2, h.rsvdulp1);
        be::store32(p + 6, h.qn);
        be::store32(p + 10, h.msn);
        be::store32(p + 14, h.mo);
    }
    return n;
}

}  // namespace iwemu::wire
