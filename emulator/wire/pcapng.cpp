#include "emulator/wire/pcapng.h"

#include <cstring>

namespace iwemu::wire::pcapng {

namespace {

// Writers use the host's byte order: the Section Header's magic tells a
// reader which one (pcapng §4.1).
void put16(std::vector<uint8_t>& out, uint16_t v)
{
    uint8_t b[2];
    std::memcpy(b, &v, 2);
    out.insert(out.end(), b, b + 2);
}

void put32(std::vector<uint8_t>& out, uint32_t v)
{
    uint8_t b[4];
    std::memcpy(b, &v, 4);
    out.insert(out.end(), b, b + 4);
}

void pad32(std::vector<uint8_t>& out, size_t len)
{
    out.insert(out.end(), (4 - len % 4) % 4, 0);
}

void put_option(std::vector<uint8_t>& out, uint16_t code, std::span<const uint8_t> value)
{
    put16(out, code);
    put16(out, static_cast<uint16_t>(value.size()));
    out.insert(out.end(), value.begin(), value.end());
    pad32(out, value.size());
}

void put_string_option(std::vector<uint8_t>& out, uint16_t code, std::string_view s)
{
    put_option(out, code, {reinterpret_cast<const uint8_t*>(s.data()), s.size()});
}

void put_end_of_options(std::vector<uint8_t>& out)
{
    put32(out, 0);  // opt_endofopt: code 0, length 0
}

// Block Total Length sits at offset 4 and again at the end (§3.1).
void finish_block(std::vector<uint8_t>& out, size_t start)
{
    const uint32_t total = static_cast<uint32_t>(out.size() - start + 4);
    std::memcpy(out.data() + start + 4, &total, 4);
    put32(out, total);
}

constexpr uint16_t opt_comment = 1;
constexpr uint16_t shb_userappl = 4;
constexpr uint16_t if_name = 2;
constexpr uint16_t if_tsresol = 9;

struct Reader {
    std::span<const uint8_t> f;
    bool swap = false;
    uint16_t r16(size_t at) const
    {
        uint16_t v;
        std::memcpy(&v, f.data() + at, 2);
        return swap ? static_cast<uint16_t>(__builtin_bswap16(v)) : v;
    }
    uint32_t r32(size_t at) const
    {
        uint32_t v;
        std::memcpy(&v, f.data() + at, 4);
        return swap ? __builtin_bswap32(v) : v;
    }
};

struct Interface {
    uint16_t linktype = 0;
    uint64_t ticks_per_second = 1000000;
};

uint64_t to_us(uint64_t ticks, uint64_t per_second)
{
    if (per_second == 1000000) return ticks;
    return static_cast<uint64_t>(static_cast<unsigned __int128>(ticks) * 1000000 / per_second);
}

// Options of a block body [at, end): the first comment, and if_tsresol.
void read_options(const Reader& r, size_t at, size_t end, std::string* comment, Interface* iface)
{
    while (at + 4 <= end) {
        const uint16_t code = r.r16(at), len = r.r16(at + 2);
        at += 4;
        if (code == 0 || at + len > end) return;
        if (code == opt_comment && comment && comment->empty())
            comment->assign(reinterpret_cast<const char*>(r.f.data() + at), len);
        if (code == if_tsresol && iface && len >= 1) {
            const uint8_t v = r.f[at];
            uint64_t per = 1;
            const unsigned exp = v & 0x7F;
            for (unsigned i = 0; i < exp && per < (uint64_t{1} << 62); ++i) per *= (v & 0x80) ? 2 : 10;
            iface->ticks_per_second = per;
        }
        at += (len + 3u) & ~3u;
    }
}

ReadResult read_pcapng(std::span<const uint8_t> file)
{
    ReadResult res;
    Reader r{file};
    std::vector<Interface> ifaces;
    size_t at = 0;
    while (at < file.size()) {
        if (file.size() - at < 12) {
            res.error = "truncated block at offset " + std::to_string(at);
            return res;
        }
        uint32_t type;
        std::memcpy(&type, file.data() + at, 4);
        if (type == block_shb) {
            uint32_t magic;
            std::memcpy(&magic, file.data() + at + 8, 4);
            if (magic == byte_order_magic) r.swap = false;
            else if (magic == __builtin_bswap32(byte_order_magic)) r.swap = true;
            else {
                res.error = "bad byte-order magic at offset " + std::to_string(at);
                return res;
            }
            ifaces.clear();  // interface ids are per section
        } else {
            type = r.r32(at);
        }
        const uint32_t len = r.r32(at + 4);
        if (len < 12 || len % 4 != 0 || len > file.size() - at) {
            res.error = "bad block length " + std::to_string(len) + " at offset " + std::to_string(at);
            return res;
        }
        const size_t body = at + 8, end = at + len - 4;
        if (type == block_idb && end - body >= 8) {
            Interface i;
            i.linktype = r.r16(body);
            read_options(r, body + 8, end, nullptr, &i);
            ifaces.push_back(i);
        } else if (type == block_epb && end - body >= 20) {
            const uint32_t id = r.r32(body);
            const uint64_t ts = uint64_t{r.r32(body + 4)} << 32 | r.r32(body + 8);
            const uint32_t cap = r.r32(body + 12), orig = r.r32(body + 16);
            if (id >= ifaces.size() || cap > end - body - 20) {
                res.error = "bad enhanced packet block at offset " + std::to_string(at);
                return res;
            }
            Packet p;
            p.linktype = ifaces[id].linktype;
            p.timestamp_us = to_us(ts, ifaces[id].ticks_per_second);
            p.data = file.subspan(body + 20, cap);
            p.original_length = orig;
            read_options(r, body + 20 + ((cap + 3u) & ~3u), end, &p.comment, nullptr);
            res.packets.push_back(std::move(p));
        } else if (type == block_spb && end - body >= 4 && !ifaces.empty()) {
            Packet p;
            p.linktype = ifaces[0].linktype;
            p.original_length = r.r32(body);
            p.data = file.subspan(body + 4, std::min<size_t>(p.original_length, end - body - 4));
            res.packets.push_back(std::move(p));
        }
        at += len;
    }
    return res;
}

// Classic libpcap format: 24-octet file header, 16-octet record headers.
ReadResult read_pcap(std::span<const uint8_t> file)
{
    ReadResult res;
    Reader r{file};
    uint32_t magic;
    std::memcpy(&magic, file.data(), 4);
    bool nanos = false;
    if (magic == 0xA1B2C3D4 || magic == 0xA1B23C4D) r.swap = false;
    else r.swap = true;
    nanos = r.r32(0) == 0xA1B23C4D;
    const uint16_t linktype = static_cast<uint16_t>(r.r32(20));
    size_t at = 24;
    while (at < file.size()) {
        if (file.size() - at < 16) {
            res.error = "truncated record at offset " + std::to_string(at);
            return res;
        }
        const uint32_t sec = r.r32(at), frac = r.r32(at + 4), cap = r.r32(at + 8), orig = r.r32(at + 12);
        if (cap > file.size() - at - 16) {
            res.error = "truncated packet at offset " + std::to_string(at);
            return res;
        }
        Packet p;
        p.linktype = linktype;
        p.timestamp_us = uint64_t{sec} * 1000000 + (nanos ? frac / 1000 : frac);
        p.data = file.subspan(at + 16, cap);
        p.original_length = orig;
        res.packets.push_back(std::move(p));
        at += 16 + cap;
    }
    return res;
}

}  // namespace

void append_section_header(std::vector<uint8_t>& out, std::string_view user_application)
{
    const size_t start = out.size();
    put32(out, block_shb);
    put32(out, 0);  // total length, patched
    put32(out, byte_order_magic);
    put16(out, 1);  // major
    put16(out, 0);  // minor
    put32(out, 0xFFFFFFFF);  // section length: not specified (-1)
    put32(out, 0xFFFFFFFF);
    if (!user_application.empty()) put_string_option(out, shb_userappl, user_application);
    put_end_of_options(out);
    finish_block(out, start);
}

void append_interface(std::vector<uint8_t>& out, uint16_t linktype, uint32_t snaplen, std::string_view name)
{
    const size_t start = out.size();
    put32(out, block_idb);
    put32(out, 0);
    put16(out, linktype);
    put16(out, 0);  // reserved
    put32(out, snaplen);
    if (!name.empty()) put_string_option(out, if_name, name);
    const uint8_t resol = 6;
    put_option(out, if_tsresol, {&resol, 1});
    put_end_of_options(out);
    finish_block(out, start);
}

void append_enhanced_packet(std::vector<uint8_t>& out, uint32_t interface_id, uint64_t timestamp_us,
                            std::span<const uint8_t> captured, uint32_t original_length, std::string_view comment)
{
    const size_t start = out.size();
    put32(out, block_epb);
    put32(out, 0);
    put32(out, interface_id);
    put32(out, static_cast<uint32_t>(timestamp_us >> 32));
    put32(out, static_cast<uint32_t>(timestamp_us));
    put32(out, static_cast<uint32_t>(captured.size()));
    put32(out, original_length);
    out.insert(out.end(), captured.begin(), captured.end());
    pad32(out, captured.size());
    if (!comment.empty()) {
        put_string_option(out, opt_comment, comment);
        put_end_of_options(out);
    }
    finish_block(out, start);
}

ReadResult read_capture(std::span<const uint8_t> file)
{
    if (file.size() < 4) return {{}, "not a capture file (too short)"};
    uint32_t magic;
    std::memcpy(&magic, file.data(), 4);
    if (magic == block_shb) return read_pcapng(file);
    if (file.size() >= 24 && (magic == 0xA1B2C3D4 || magic == 0xD4C3B2A1 || magic == 0xA1B23C4D || magic == 0x4D3CB2A1))
        return read_pcap(file);
    return {{}, "not a pcapng or pcap file"};
}

}  // namespace iwemu::wire::pcapng
