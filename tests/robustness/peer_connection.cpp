#include "tests/robustness/peer_connection.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>

#include "emulator/wire/fpdu.h"
#include "emulator/wire/fpdu_receiver.h"
#include "emulator/wire/read_request.h"
#include "emulator/wire/rdmap_opcode.h"

namespace iwemu::robustness {

namespace {

using Clock = std::chrono::steady_clock;

int remaining_ms(Clock::time_point deadline)
{
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
    return left < 0 ? 0 : static_cast<int>(left);
}

bool parse_region(std::string_view text, std::string_view key, RemoteRegion* r)
{
    const size_t at = text.find(std::string(key) + "=");
    if (at == std::string_view::npos) return false;
    unsigned stag = 0;
    unsigned long long addr = 0, len = 0;
    const std::string s(text.substr(at + key.size() + 1));
    if (std::sscanf(s.c_str(), "%x:%llx:%llu", &stag, &addr, &len) != 3) return false;
    *r = RemoteRegion{stag, addr, len};
    return true;
}

// Collects the victim's FPDUs (FpduReceiver push mode).
struct Collector {
    VictimAnswer* answer;
    std::vector<uint8_t> header;
    uint8_t opcode = 0;
    std::vector<uint8_t> body;
    bool done_terminate = false;
    unsigned local_port = 0;

    void on_segment_header(std::span<const uint8_t> h, uint16_t)
    {
        header.assign(h.begin(), h.end());
        opcode = h.size() > 1 ? (h[1] & wire::rdmap_control_opcode) : 0xFF;
        body.clear();
    }
    void on_payload(std::span<const uint8_t> s, uint32_t offset)
    {
        // Keep Terminates and small payloads (Read Responses of test data).
        if (opcode == 0x7 || offset + s.size() <= 4096) body.insert(body.end(), s.begin(), s.end());
    }
    void on_segment_end()
    {
        answer->opcodes.push_back(opcode);
        if (opcode == 0x7 && !answer->terminate) {
            answer->terminate_body = body;
            answer->terminate = wire::decode_terminate(answer->terminate_body);
            done_terminate = true;
            // For tests/conformance/terminates.sh: which connection, which code.
            const auto& c = answer->terminate->control;
            std::printf("  terminate received on local port %u: %u/%u/0x%02x D=%d R=%d\n", local_port,
                        static_cast<unsigned>(c.code.layer), c.code.etype, c.code.error_code, c.d, c.r);
        } else if (opcode == 0x2 && body.size() <= 4096) {
            std::vector<uint8_t> p = header;
            p.insert(p.end(), body.begin(), body.end());
            answer->read_response_payloads.push_back(std::move(p));
        }
    }
    void on_error(const wire::FpduRxError& e)
    {
        answer->fpdu_error = true;
        answer->fpdu_error_text = std::string(e.what);
    }
};

}  // namespace

bool parse_victim_info(std::string_view text, VictimInfo* out)
{
    if (!parse_region(text, "rw", &out->rw) || !parse_region(text, "ro", &out->ro) ||
        !parse_region(text, "wo", &out->wo) || !parse_region(text, "big", &out->big))
        return false;
    const size_t r = text.find("recv=");
    const size_t i = text.find("ird=");
    if (r == std::string_view::npos || i == std::string_view::npos) return false;
    const std::string rs(text.substr(r + 5)), is(text.substr(i + 4));
    return std::sscanf(rs.c_str(), "%d:%d", &out->recv_count, &out->recv_size) == 2 &&
           std::sscanf(is.c_str(), "%d", &out->ird) == 1;
}

PeerConnection::~PeerConnection() { close(); }

bool PeerConnection::connect_tcp(uint16_t port, int rcvbuf, std::string* error)
{
    fd_ = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd_ < 0) {
        *error = std::string("socket: ") + std::strerror(errno);
        return false;
    }
    if (rcvbuf > 0) ::setsockopt(fd_, SOL_SOCKET, SO_RCVBUF, &rcvbuf, sizeof(rcvbuf));
    const int one = 1;
    ::setsockopt(fd_, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_port = htons(port);
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (::connect(fd_, reinterpret_cast<sockaddr*>(&a), sizeof(a)) != 0) {
        *error = std::string("connect: ") + std::strerror(errno);
        return false;
    }
    return true;
}

bool PeerConnection::mpa_startup(std::string_view private_data, std::string* error)
{
    wire::MpaFrame req;
    req.type = wire::MpaFrameType::request;
    req.crc = true;
    req.rev = 2;
    req.enhanced = wire::MpaEnhancedData{false, false, 16, false, false, 16};
    req.private_data = {reinterpret_cast<const uint8_t*>(private_data.data()), private_data.size()};
    std::vector<uint8_t> out(req.wire_size());
    if (wire::encode_mpa_frame(req, out) == 0 || !send_raw(out)) {
        *error = "cannot send the MPA Request";
        return false;
    }
    const auto deadline = Clock::now() + std::chrono::seconds(10);
    for (;;) {
        const auto r = wire::parse_mpa_frame(reply_bytes_, wire::MpaFrameType::reply);
        if (r.status == wire::MpaParseStatus::complete) {
            reply_ = r.frame;
            leftover_.assign(reply_bytes_.begin() + static_cast<long>(r.frame_size), reply_bytes_.end());
            reply_bytes_.resize(r.frame_size);
            reply_ = wire::parse_mpa_frame(reply_bytes_, wire::MpaFrameType::reply).frame;  // spans into reply_bytes_
            reply_seen_ = true;
            break;
        }
        if (r.status != wire::MpaParseStatus::need_more) {
            *error = "malformed MPA Reply: " + std::string(wire::to_string(r.status));
            return false;
        }
        pollfd p{fd_, POLLIN, 0};
        if (::poll(&p, 1, remaining_ms(deadline)) <= 0) {
            *error = "no MPA Reply within 10 s";
            return false;
        }
        uint8_t buf[1024];
        const ssize_t n = ::recv(fd_, buf, sizeof(buf), 0);
        if (n <= 0) {
            *error = "connection closed before the MPA Reply";
            return false;
        }
        reply_bytes_.insert(reply_bytes_.end(), buf, buf + n);
    }
    if (reply_.reject) {
        *error = "MPA Reply rejects (R=1)";
        return false;
    }
    crc_ = req.crc || reply_.crc;
    if (reply_.enhanced) info_.reply_ird = reply_.enhanced->ird;
    const std::string text(reinterpret_cast<const char*>(reply_.private_data.data()), reply_.private_data.size());
    if (!parse_victim_info(text.c_str(), &info_)) {
        *error = "victim private data not understood: " + text;
        return false;
    }
    return true;
}

bool PeerConnection::send_raw(std::span<const uint8_t> bytes)
{
    size_t done = 0;
    while (done < bytes.size()) {
        const ssize_t n = ::send(fd_, bytes.data() + done, bytes.size() - done, MSG_NOSIGNAL);
        if (n < 0 && errno == EINTR) continue;
        if (n <= 0) return false;
        done += static_cast<size_t>(n);
    }
    return true;
}

std::vector<uint8_t> PeerConnection::fpdu(std::span<const uint8_t> header, std::span<const uint8_t> payload) const
{
    last_ulpdu_.assign(header.begin(), header.end());
    last_ulpdu_.insert(last_ulpdu_.end(), payload.begin(), payload.end());
    std::vector<uint8_t> out(wire::mpa_fpdu_wire_length(header.size() + payload.size(), false));
    const size_t n = wire::encode_fpdu(out, header, payload, 0, wire::FpduFraming{crc_, false});
    if (n > 0 || header.size() + payload.size() > wire::mpa_ulpdu_length_max) {
        out.resize(n);
        return out;
    }
    // Above MULPDU (64768) the encoder refuses: lay the FPDU out by hand
    // (RFC 5044 §4.1) -- hostile peers do not respect MULPDU.
    const size_t ulen = header.size() + payload.size();
    out.assign({static_cast<uint8_t>(ulen >> 8), static_cast<uint8_t>(ulen)});
    out.insert(out.end(), header.begin(), header.end());
    out.insert(out.end(), payload.begin(), payload.end());
    out.resize(out.size() + wire::mpa_pad_length(ulen), 0);
    const uint32_t crc = crc_ ? wire::crc32c(out) : 0;
    out.resize(out.size() + wire::mpa_crc_size);
    wire::store_crc_field(crc, out.data() + out.size() - wire::mpa_crc_size);
    return out;
}

bool PeerConnection::send_fpdu(std::span<const uint8_t> header, std::span<const uint8_t> payload)
{
    return send_raw(fpdu(header, payload));
}

std::vector<uint8_t> PeerConnection::untagged(uint8_t opcode, uint32_t qn, uint32_t msn, uint32_t mo, bool last,
                                              uint8_t dv, uint8_t rv)
{
    wire::DdpHeader h;
    h.control = wire::DdpControl{false, last, 0, dv};
    h.rsvdulp0 = wire::encode_rdmap_control(wire::RdmapControl{rv, 0, opcode});
    h.qn = qn;
    h.msn = msn;
    h.mo = mo;
    std::vector<uint8_t> out(wire::ddp_untagged_header_size);
    wire::encode_ddp_header(h, out);
    return out;
}

std::vector<uint8_t> PeerConnection::tagged(uint8_t opcode, uint32_t stag, uint64_t to, bool last, uint8_t dv,
                                            uint8_t rv)
{
    wire::DdpHeader h;
    h.control = wire::DdpControl{true, last, 0, dv};
    h.rsvdulp0 = wire::encode_rdmap_control(wire::RdmapControl{rv, 0, opcode});
    h.stag = stag;
    h.to = to;
    std::vector<uint8_t> out(wire::ddp_tagged_header_size);
    wire::encode_ddp_header(h, out);
    return out;
}

std::vector<uint8_t> PeerConnection::read_request(uint32_t msn, uint32_t sink_stag, uint64_t sink_to,
                                                  uint32_t size, uint32_t source_stag, uint64_t source_to)
{
    std::vector<uint8_t> out = untagged(0x1, wire::rdmap_qn_read_request, msn, 0);
    out.resize(out.size() + wire::rdma_read_request_header_size);
    wire::encode_read_request(wire::RdmaReadRequestHeader{sink_stag, sink_to, size, source_stag, source_to},
                              std::span<uint8_t>(out).subspan(wire::ddp_untagged_header_size));
    return out;
}

VictimAnswer PeerConnection::receive(std::chrono::milliseconds timeout, std::chrono::milliseconds linger)
{
    VictimAnswer answer;
    wire::FpduReceiverOptions opts;
    opts.crc = crc_;
    wire::FpduReceiver rx(opts);
    Collector col{&answer, {}, 0, {}, false, 0};
    sockaddr_in local{};
    socklen_t len = sizeof(local);
    if (::getsockname(fd_, reinterpret_cast<sockaddr*>(&local), &len) == 0) col.local_port = ntohs(local.sin_port);
    auto deadline = Clock::now() + timeout;
    bool lingering = false;
    if (!leftover_.empty()) {
        rx.feed(leftover_, col);
        leftover_.clear();
    }
    std::vector<uint8_t> buf(256 * 1024);
    for (;;) {
        if (col.done_terminate && !lingering) {
            lingering = true;
            deadline = std::min(deadline, Clock::now() + linger);
        }
        pollfd p{fd_, POLLIN, 0};
        const int pr = ::poll(&p, 1, remaining_ms(deadline));
        if (pr == 0) {
            answer.timed_out = !lingering;
            return answer;
        }
        const ssize_t n = ::recv(fd_, buf.data(), buf.size(), 0);
        if (n == 0) {
            answer.eof = true;
            return answer;
        }
        if (n < 0) {
            if (errno == EINTR || errno == EAGAIN) continue;
            answer.eof = true;
            answer.reset = errno == ECONNRESET;
            return answer;
        }
        if (!rx.failed()) rx.feed(std::span<const uint8_t>(buf.data(), static_cast<size_t>(n)), col);
    }
}

void PeerConnection::shutdown_write()
{
    if (fd_ >= 0) ::shutdown(fd_, SHUT_WR);
}

void PeerConnection::close_abortive()
{
    if (fd_ < 0) return;
    const linger l{1, 0};
    ::setsockopt(fd_, SOL_SOCKET, SO_LINGER, &l, sizeof(l));
    ::close(fd_);
    fd_ = -1;
}

void PeerConnection::close()
{
    if (fd_ >= 0) ::close(fd_);
    fd_ = -1;
}

}  // namespace iwemu::robustness
