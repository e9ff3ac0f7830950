// One TCP connection of the hostile peer: a valid MPA startup as Rev 2
// Initiator (RFC 5044 §7.1, RFC 6581), then whatever octets a scenario wants
// to send, built with the project's wire codecs, and a receiver that reads
// the victim's FPDUs until a Terminate, EOF or a time limit.
#pragma once

#include <chrono>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "emulator/wire/ddp_header.h"
#include "emulator/wire/mpa_frame.h"
#include "emulator/wire/terminate_message.h"

namespace iwemu::robustness {

// One registered region of the victim, as its accept private data tells it.
struct RemoteRegion {
    uint32_t stag = 0;
    uint64_t addr = 0;
    uint64_t len = 0;
};

struct VictimInfo {
    RemoteRegion rw, ro, wo, big;
    int recv_count = 0;
    int recv_size = 0;
    int ird = 0;             // what the victim asked for (responder resources)
    uint16_t reply_ird = 0;  // IRD in the MPA Reply's enhanced data
};
bool parse_victim_info(std::string_view text, VictimInfo* out);

// What the victim sent back after the scenario.
struct VictimAnswer {
    std::vector<uint8_t> opcodes;              // RDMAP opcode of each complete FPDU
    std::optional<wire::TerminateMessage> terminate;
    std::vector<uint8_t> terminate_body;       // terminate->spans point here
    std::vector<std::vector<uint8_t>> read_response_payloads;  // one per Read Response FPDU (small ones)
    bool fpdu_error = false;                   // the victim's stream itself was malformed
    std::string fpdu_error_text;
    bool eof = false;       // FIN or RST seen
    bool reset = false;     // RST
    bool timed_out = false;
};

class PeerConnection {
public:
    PeerConnection() = default;
    ~PeerConnection();
    PeerConnection(const PeerConnection&) = delete;
    PeerConnection& operator=(const PeerConnection&) = delete;

    // TCP connect to 127.0.0.1:port; rcvbuf > 0 sets SO_RCVBUF first.
    bool connect_tcp(uint16_t port, int rcvbuf, std::string* error);
    // Request (Rev 2, S=1, C=1, client-server, IRD/ORD 16) with `private_data`,
    // then the Reply; false if rejected, malformed or not in time.
    bool mpa_startup(std::string_view private_data, std::string* error);

    bool send_raw(std::span<const uint8_t> bytes);
    // One FPDU: header ‖ payload, framed with the negotiated CRC; `mutate`
    // may change the encoded octets (index 0 = ULPDU_Length) before sending.
    std::vector<uint8_t> fpdu(std::span<const uint8_t> header, std::span<const uint8_t> payload) const;
    bool send_fpdu(std::span<const uint8_t> header, std::span<const uint8_t> payload);

    // Headers.
    static std::vector<uint8_t> untagged(uint8_t opcode, uint32_t qn, uint32_t msn, uint32_t mo, bool last = true,
                                         uint8_t dv = 1, uint8_t rv = 1);
    static std::vector<uint8_t> tagged(uint8_t opcode, uint32_t stag, uint64_t to, bool last = true,
                                       uint8_t dv = 1, uint8_t rv = 1);
    static std::vector<uint8_t> read_request(uint32_t msn, uint32_t sink_stag, uint64_t sink_to, uint32_t size,
                                             uint32_t source_stag, uint64_t source_to);

    // Read until a Terminate (then keep reading to EOF for up to `linger`),
    // EOF, or `timeout`.
    VictimAnswer receive(std::chrono::milliseconds timeout,
                         std::chrono::milliseconds linger = std::chrono::milliseconds(2000));

    void shutdown_write();
    void close_abortive();  // RST
    void close();
    int fd() const { return fd_; }
    bool crc() const { return crc_; }
    const VictimInfo& victim() const { return info_; }
    const wire::MpaFrame& reply() const { return reply_; }
    // ULPDU (header ‖ payload) of the last FPDU built: what a Terminate for it echoes.
    const std::vector<uint8_t>& last_ulpdu() const { return last_ulpdu_; }
    bool reply_seen() const { return reply_seen_; }

private:
    int fd_ = -1;
    bool crc_ = true;
    bool reply_seen_ = false;
    wire::MpaFrame reply_;
    std::vector<uint8_t> reply_bytes_;
    std::vector<uint8_t> leftover_;  // octets after the Reply
    mutable std::vector<uint8_t> last_ulpdu_;
    VictimInfo info_;
};

}  // namespace iwemu::robustness
