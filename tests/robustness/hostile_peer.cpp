// hostile_peer: attacks an iwemu listener (victim_server under iwemu-run)
// with one malformed or abusive peer behaviour per connection and checks
//  * the Terminate iwemu sends back (decoded with the wire codecs) carries the
//    RFC layer/etype/ecode (WIRE.md §9) and the headers RFC 5040 §4.8 wants,
//  * the victim reports the expected completions / events,
//  * the canaries around every registered region are intact,
//  * the victim is still alive and serves a well-behaved connection next.
//
// usage: hostile_peer IWEMU_RUN VICTIM_SERVER SCENARIO|all|list
#include <arpa/inet.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <algorithm>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "emulator/wire/read_request.h"
#include "emulator/wire/terminate_codes.h"
#include "tests/robustness/peer_connection.h"
#include "tests/robustness/victim_process.h"

namespace iwemu::robustness {
namespace {

using namespace std::chrono_literals;
using wire::TerminateCode;
using wire::TerminateLayer;
namespace et = wire::etype;
namespace ec = wire::ecode;

// What one scenario expects.
struct Expect {
    // Victim side: does a connect request reach the ULP (REQUEST line)?
    bool request_reaches_ulp = true;
    // A Terminate from iwemu with this code, and its header bits.
    std::optional<TerminateCode> terminate;
    bool term_d = false, term_r = false;
    // Substrings that must appear in the victim's lines for the connection.
    std::vector<std::string> victim;
    // The first receive WC status, if a receive was consumed.
    std::string first_wc;
};

struct Context {
    uint16_t port = 0;
    VictimProcess* victim = nullptr;
    int tag = 0;
};

struct Outcome {
    bool ok = true;
    std::string why;
    void fail(const std::string& w)
    {
        if (ok) why = w;
        else why += "; " + w;
        ok = false;
    }
};

std::string code_text(const TerminateCode& c)
{
    char b[64];
    std::snprintf(b, sizeof(b), "%u/%u/0x%02x (", static_cast<unsigned>(c.layer), c.etype, c.error_code);
    return b + std::string(wire::terminate_code_name(c)) + ")";
}

std::vector<uint8_t> bytes(std::string_view s) { return {s.begin(), s.end()}; }

// A well-formed connection, returns the victim's serial (0 on failure).
int open_connection(Context& cx, PeerConnection& pc, const std::string& extra, Outcome& out, int rcvbuf = 0)
{
    std::string err;
    const std::string tag = "hostile#" + std::to_string(++cx.tag) + " " + extra;
    if (!pc.connect_tcp(cx.port, rcvbuf, &err) || !pc.mpa_startup(tag, &err)) {
        out.fail("startup: " + err);
        return 0;
    }
    const auto line = cx.victim->wait_for({"REQUEST conn=", "\"" + tag + "\""}, 10s);
    if (!line) {
        out.fail("the victim reported no REQUEST for '" + tag + "'");
        return 0;
    }
    const std::string& l = cx.victim->lines()[*line];
    return std::atoi(l.c_str() + l.find("conn=") + 5);
}

// Wait for the victim to finish connection `serial`, then check lines.
void check_victim(Context& cx, int serial, const Expect& e, Outcome& out)
{
    if (!cx.victim->wait_for({"DONE conn=" + std::to_string(serial)}, 15s)) {
        out.fail("victim never finished conn=" + std::to_string(serial));
        return;
    }
    cx.victim->pump(100ms);  // late async events
    const auto lines = cx.victim->lines_of(serial);
    auto has = [&](const std::string& s) {
        for (const auto& l : lines)
            if (l.find(s) != std::string::npos) return true;
        return false;
    };
    for (const auto& s : e.victim)
        if (!has(s)) out.fail("victim conn=" + std::to_string(serial) + " lacks '" + s + "'");
    if (!has("CANARY conn=" + std::to_string(serial) + " ok")) out.fail("canary check failed");
    if (!e.first_wc.empty()) {
        std::string first;
        for (const auto& l : lines)
            if (l.rfind("WC ", 0) == 0) {
                first = l;
                break;
            }
        if (first.find(e.first_wc) == std::string::npos)
            out.fail("first WC is '" + first + "', expected " + e.first_wc);
    }
}

// RFC 5040 §4.8: with D=1 the Terminate echoes the offending segment's DDP
// header (14 or 18 octets by its T bit) and its length; with R=1 the Read
// Request header.  `offending` = that segment's ULPDU as we sent it.
void check_echoed_headers(const wire::TerminateMessage& t, std::span<const uint8_t> offending, Outcome& out)
{
    if (t.control.d && !offending.empty()) {
        const size_t n = wire::ddp_header_size(offending[0]);
        if (t.terminated_ddp_octets.size() != n ||
            !std::equal(t.terminated_ddp_octets.begin(), t.terminated_ddp_octets.end(), offending.begin()))
            out.fail("the echoed DDP header is not the offending segment's");
        if (t.control.m && t.ddp_segment_length != offending.size())
            out.fail("DDP Segment Length " + std::to_string(t.ddp_segment_length) + ", segment was " +
                     std::to_string(offending.size()));
    }
    if (t.control.r && offending.size() >= wire::ddp_untagged_header_size + wire::rdma_read_request_header_size) {
        const auto sent = wire::decode_read_request(offending.subspan(wire::ddp_untagged_header_size));
        if (!t.terminated_rdma_header || !sent || !(*t.terminated_rdma_header == *sent))
            out.fail("the echoed Read Request header differs from the one sent");
    }
}

void check_terminate(const VictimAnswer& a, const Expect& e, Outcome& out)
{
    if (!e.terminate) {
        if (a.terminate) out.fail("unexpected Terminate " + code_text(a.terminate->control.code));
        if (!a.eof) out.fail("the victim did not close the connection");  // RFC 5040 §5.4: the stream ends
        return;
    }
    if (!a.terminate) {
        out.fail("no Terminate (expected " + code_text(*e.terminate) + ")" + (a.timed_out ? ", timed out" : "") +
                 (a.eof ? (a.reset ? ", connection reset" : ", connection closed") : "") +
                 " after " + std::to_string(a.opcodes.size()) + " FPDU(s)" + (a.fpdu_error ? ", victim stream: " + a.fpdu_error_text : ""));
        return;
    }
    const auto& t = *a.terminate;
    if (t.status != wire::TerminateDecodeStatus::ok) out.fail("Terminate does not decode cleanly");
    if (t.layout != wire::TerminateLayout::rfc5040) out.fail("Terminate not in the RFC 5040 layout");
    if (!(t.control.code == *e.terminate))
        out.fail("Terminate " + code_text(t.control.code) + ", expected " + code_text(*e.terminate));
    if (t.control.d != e.term_d || t.control.r != e.term_r)
        out.fail("Terminate D/R " + std::to_string(t.control.d) + "/" + std::to_string(t.control.r) + ", expected " +
                 std::to_string(e.term_d) + "/" + std::to_string(e.term_r));
    if (t.control.d && !t.control.m) out.fail("Terminate with D=1 but M=0");
    if (!a.eof) out.fail("no FIN after the Terminate");
    // The Terminate must be the last FPDU (RFC 5040 §5.4).
    if (!a.opcodes.empty() && a.opcodes.back() != 0x7) out.fail("FPDUs after the Terminate");
}

// ---- scenarios ---------------------------------------------------------------

using Scenario = std::function<void(Context&, Outcome&)>;

const std::vector<std::string> flushed2 = {"IBV_WC_WR_FLUSH_ERR", "DISCONNECTED"};

// Connect, send what `attack` builds, expect `e` (Terminate + victim lines).
void fpdu_attack(Context& cx, Outcome& out, const std::string& extra, Expect e,
                 const std::function<void(PeerConnection&)>& attack, int rcvbuf = 0)
{
    PeerConnection pc;
    const int serial = open_connection(cx, pc, extra, out, rcvbuf);
    if (!serial) return;
    attack(pc);
    const VictimAnswer a = pc.receive(10s);
    check_terminate(a, e, out);
    if (a.terminate) check_echoed_headers(*a.terminate, pc.last_ulpdu(), out);
    pc.close();
    check_victim(cx, serial, e, out);
}

Expect term(TerminateLayer l, uint8_t et, uint8_t ec, bool d, bool r, std::vector<std::string> victim = flushed2)
{
    Expect e;
    // The QP goes to ERROR with an affiliated asynchronous error event:
    // access errors for protection failures, fatal for the rest.
    const bool protection = (l == TerminateLayer::ddp && et == et::ddp_tagged_buffer &&
                             ec != ec::ddp_tagged_invalid_ddp_version) ||
                            (l == TerminateLayer::rdmap && et == et::rdmap_remote_protection);
    victim.push_back(protection ? "IBV_EVENT_QP_ACCESS_ERR" : "IBV_EVENT_QP_FATAL");
    e.terminate = TerminateCode{l, et, ec};
    e.term_d = d;
    e.term_r = r;
    e.victim = std::move(victim);
    return e;
}

const uint8_t hello[] = {'h', 'e', 'l', 'l', 'o'};

void good(Context& cx, Outcome& out)
{
    PeerConnection pc;
    const int serial = open_connection(cx, pc, "good", out);
    if (!serial) return;
    const auto& v = pc.victim();
    pc.send_fpdu(PeerConnection::untagged(0x3, 0, 1, 0), hello);
    std::vector<uint8_t> data(64);
    for (size_t i = 0; i < data.size(); ++i) data[i] = static_cast<uint8_t>(0xC0 + i);
    pc.send_fpdu(PeerConnection::tagged(0x0, v.rw.stag, v.rw.addr + 100), data);
    pc.send_fpdu(PeerConnection::read_request(1, 0x1234, 0x5000, 64, v.rw.stag, v.rw.addr + 100), {});
    // Wait for the Read Response, then close gracefully.
    VictimAnswer a;
    {
        const auto deadline = std::chrono::steady_clock::now() + 10s;
        while (a.read_response_payloads.empty() && std::chrono::steady_clock::now() < deadline && !a.eof) {
            VictimAnswer part = pc.receive(500ms, 0ms);
            a.opcodes.insert(a.opcodes.end(), part.opcodes.begin(), part.opcodes.end());
            for (auto& p : part.read_response_payloads) a.read_response_payloads.push_back(p);
            a.terminate = part.terminate;
            a.eof = part.eof;
            if (a.terminate) break;
        }
    }
    if (a.terminate) out.fail("Terminate " + code_text(a.terminate->control.code) + " on a good connection");
    if (a.read_response_payloads.size() != 1) {
        out.fail("expected one Read Response, got " + std::to_string(a.read_response_payloads.size()));
    } else {
        const auto& rr = a.read_response_payloads[0];
        const auto h = wire::decode_ddp_header(rr);
        if (!h || h->stag != 0x1234 || h->to != 0x5000 || !h->control.last)
            out.fail("Read Response header wrong (sink STag/TO/L)");
        if (rr.size() != 14 + 64 || !std::equal(data.begin(), data.end(), rr.begin() + 14))
            out.fail("Read Response data differ from what was written");
    }
    pc.shutdown_write();
    const VictimAnswer rest = pc.receive(5s);
    if (rest.terminate) out.fail("Terminate after a graceful close");
    pc.close();
    Expect e;
    e.victim = {"ESTABLISHED", "IBV_WC_SUCCESS byte_len=5 data=68656c6c6f", "DISCONNECTED"};
    e.first_wc = "IBV_WC_SUCCESS";
    check_victim(cx, serial, e, out);
}

// MPA framing attacks: a Send of `hello` (QN 0, MSN 1) whose FPDU `mangle`
// alters before it goes out.
void mangled_send_attack(Context& cx, Outcome& out, Expect e,
                         const std::function<void(std::vector<uint8_t>&)>& mangle)
{
    fpdu_attack(cx, out, "", std::move(e), [&mangle](PeerConnection& pc) {
        auto f = pc.fpdu(PeerConnection::untagged(0x3, 0, 1, 0), hello);
        mangle(f);
        pc.send_raw(f);
    });
}

void bad_crc(Context& cx, Outcome& out)
{
    mangled_send_attack(cx, out, term(TerminateLayer::llp, et::llp_mpa, ec::mpa_crc_error, false, false),
                        [](std::vector<uint8_t>& f) { f.back() ^= 0x01; });
}

// ULPDU_Length smaller than the DDP header it announces: MPA error 3
// (fpdu_receiver.h, CHECKLIST decision 7, as Linux siw).
void ulpdu_length_zero(Context& cx, Outcome& out)
{
    mangled_send_attack(cx, out,
                        term(TerminateLayer::llp, et::llp_mpa, ec::mpa_marker_and_ulpdu_length_disagree, false, false),
                        [](std::vector<uint8_t>& f) {
                            f[0] = 0;
                            f[1] = 0;
                        });
}

void ulpdu_length_short(Context& cx, Outcome& out)
{
    mangled_send_attack(cx, out,
                        term(TerminateLayer::llp, et::llp_mpa, ec::mpa_marker_and_ulpdu_length_disagree, false, false),
                        [](std::vector<uint8_t>& f) {
                            f[0] = 0;
                            f[1] = 10;  // < 18, the untagged header its first octet announces
                        });
}

// ULPDU_Length larger than the octets that follow: the CRC is then taken
// from the wrong place and cannot match.
void ulpdu_length_too_long(Context& cx, Outcome& out)
{
    fpdu_attack(cx, out, "", term(TerminateLayer::llp, et::llp_mpa, ec::mpa_crc_error, false, false),
                [](PeerConnection& pc) {
                    auto f = pc.fpdu(PeerConnection::untagged(0x3, 0, 1, 0), hello);
                    f[1] = static_cast<uint8_t>(f[1] + 8);
                    pc.send_raw(f);
                    pc.send_fpdu(PeerConnection::untagged(0x3, 0, 2, 0), hello);  // octets to misread
                });
}

// The largest ULPDU_Length the field can carry, as an RDMA Write into the
// 2 KiB "rw" region: refused before a single octet lands (bounds).
void ulpdu_length_oversize(Context& cx, Outcome& out)
{
    fpdu_attack(cx, out, "",
                term(TerminateLayer::ddp, et::ddp_tagged_buffer, ec::ddp_tagged_base_or_bounds_violation, true, false,
                     {"DISCONNECTED"}),
                [](PeerConnection& pc) {
                    std::vector<uint8_t> big(65535 - 14, 0x5A);
                    pc.send_fpdu(PeerConnection::tagged(0x0, pc.victim().rw.stag, pc.victim().rw.addr), big);
                });
}

void ddp_version_untagged(Context& cx, Outcome& out)
{
    fpdu_attack(cx, out, "",
                term(TerminateLayer::ddp, et::ddp_untagged_buffer, ec::ddp_untagged_invalid_ddp_version, true, false),
                [](PeerConnection& pc) { pc.send_fpdu(PeerConnection::untagged(0x3, 0, 1, 0, true, 2), hello); });
}

void ddp_version_tagged(Context& cx, Outcome& out)
{
    fpdu_attack(cx, out, "",
                term(TerminateLayer::ddp, et::ddp_tagged_buffer, ec::ddp_tagged_invalid_ddp_version, true, false),
                [](PeerConnection& pc) {
                    pc.send_fpdu(PeerConnection::tagged(0x0, pc.victim().rw.stag, pc.victim().rw.addr, true, 0), hello);
                });
}

void rdmap_version(Context& cx, Outcome& out)
{
    fpdu_attack(cx, out, "",
                term(TerminateLayer::rdmap, et::rdmap_remote_operation, ec::rdmap_invalid_rdmap_version, true, false),
                [](PeerConnection& pc) { pc.send_fpdu(PeerConnection::untagged(0x3, 0, 1, 0, true, 1, 0), hello); });
}

void unknown_opcode(Context& cx, Outcome& out)
{
    fpdu_attack(cx, out, "",
                term(TerminateLayer::rdmap, et::rdmap_remote_operation, ec::rdmap_unexpected_opcode, true, false),
                [](PeerConnection& pc) { pc.send_fpdu(PeerConnection::untagged(0xC, 0, 1, 0), hello); });
}

void invalid_stag(Context& cx, Outcome& out)
{
    fpdu_attack(cx, out, "",
                term(TerminateLayer::ddp, et::ddp_tagged_buffer, ec::ddp_tagged_invalid_stag, true, false),
                [](PeerConnection& pc) {
                    pc.send_fpdu(PeerConnection::tagged(0x0, pc.victim().rw.stag ^ 0x5A5A0000u, pc.victim().rw.addr),
                                 hello);
                });
}

void write_beyond_end(Context& cx, Outcome& out)
{
    fpdu_attack(cx, out, "",
                term(TerminateLayer::ddp, et::ddp_tagged_buffer, ec::ddp_tagged_base_or_bounds_violation, true, false),
                [](PeerConnection& pc) {
                    std::vector<uint8_t> d(64, 0x77);
                    const auto& rw = pc.victim().rw;
                    pc.send_fpdu(PeerConnection::tagged(0x0, rw.stag, rw.addr + rw.len - 32), d);
                });
}

void write_below_base(Context& cx, Outcome& out)
{
    fpdu_attack(cx, out, "",
                term(TerminateLayer::ddp, et::ddp_tagged_buffer, ec::ddp_tagged_base_or_bounds_violation, true, false),
                [](PeerConnection& pc) {
                    const auto& rw = pc.victim().rw;
                    pc.send_fpdu(PeerConnection::tagged(0x0, rw.stag, rw.addr - 16), hello);
                });
}

void write_to_wrap(Context& cx, Outcome& out)
{
    // TO + length wraps 2^64: bounds or TO wrap are both right; iwemu's
    // region check reports it as a bounds violation unless it tests wrap first.
    PeerConnection pc;
    const int serial = open_connection(cx, pc, "", out);
    if (!serial) return;
    pc.send_fpdu(PeerConnection::tagged(0x0, pc.victim().rw.stag, ~uint64_t{0} - 2), hello);
    const VictimAnswer a = pc.receive(10s);
    pc.close();
    if (!a.terminate) {
        out.fail("no Terminate for a wrapping TO");
    } else {
        const auto c = a.terminate->control.code;
        if (!(c == TerminateCode{TerminateLayer::ddp, et::ddp_tagged_buffer, ec::ddp_tagged_to_wrap}) &&
            !(c == TerminateCode{TerminateLayer::ddp, et::ddp_tagged_buffer, ec::ddp_tagged_base_or_bounds_violation}))
            out.fail("Terminate " + code_text(c) + " for a wrapping TO");
    }
    Expect e;
    e.victim = flushed2;
    check_victim(cx, serial, e, out);
}

// DDP has no access-rights code: invalid STag, as Linux siw (decision 7).
void write_without_right(Context& cx, Outcome& out)
{
    fpdu_attack(cx, out, "",
                term(TerminateLayer::ddp, et::ddp_tagged_buffer, ec::ddp_tagged_invalid_stag, true, false,
                     {"IBV_WC_WR_FLUSH_ERR", "DISCONNECTED", "IBV_EVENT_QP_ACCESS_ERR"}),
                [](PeerConnection& pc) {
                    pc.send_fpdu(PeerConnection::tagged(0x0, pc.victim().ro.stag, pc.victim().ro.addr), hello);
                });
}

void read_without_right(Context& cx, Outcome& out)
{
    fpdu_attack(cx, out, "",
                term(TerminateLayer::rdmap, et::rdmap_remote_protection, ec::rdmap_access_rights_violation, true, true,
                     {"IBV_WC_WR_FLUSH_ERR", "DISCONNECTED", "IBV_EVENT_QP_ACCESS_ERR"}),
                [](PeerConnection& pc) {
                    const auto& wo = pc.victim().wo;
                    pc.send_fpdu(PeerConnection::read_request(1, 0x1234, 0, 64, wo.stag, wo.addr), {});
                });
}

void read_invalid_stag(Context& cx, Outcome& out)
{
    fpdu_attack(cx, out, "",
                term(TerminateLayer::rdmap, et::rdmap_remote_protection, ec::rdmap_invalid_stag, true, true),
                [](PeerConnection& pc) {
                    const auto& rw = pc.victim().rw;
                    pc.send_fpdu(PeerConnection::read_request(1, 0x1234, 0, 64, rw.stag ^ 0x00FF0000u, rw.addr), {});
                });
}

void read_out_of_bounds(Context& cx, Outcome& out)
{
    fpdu_attack(cx, out, "",
                term(TerminateLayer::rdmap, et::rdmap_remote_protection, ec::rdmap_base_or_bounds_violation, true, true),
                [](PeerConnection& pc) {
                    const auto& ro = pc.victim().ro;
                    pc.send_fpdu(PeerConnection::read_request(1, 0x1234, 0, 4096, ro.stag, ro.addr), {});
                });
}

// IRD+1 Read Requests of 8 MiB each while we do not read: the first
// Responses cannot drain, so the last Request exceeds the IRD (RDMAP-023,
// decision: DDP 1/2/02 "no buffer").
void reads_beyond_ird(Context& cx, Outcome& out, bool patient_victim)
{
    PeerConnection pc;
    const int serial = open_connection(cx, pc, patient_victim ? "ird=2 linger=5000" : "ird=2", out, 16384);
    if (!serial) return;
    const auto& v = pc.victim();
    const int ird = v.reply_ird ? v.reply_ird : v.ird;
    if (ird != 2) out.fail("victim IRD in the Reply is " + std::to_string(ird) + ", asked for 2");
    std::vector<uint8_t> burst;
    for (int i = 0; i <= ird; ++i) {
        const auto f = pc.fpdu(
            PeerConnection::read_request(static_cast<uint32_t>(i + 1), 0x1234, 0, static_cast<uint32_t>(v.big.len),
                                         v.big.stag, v.big.addr), {});
        burst.insert(burst.end(), f.begin(), f.end());
    }
    pc.send_raw(burst);
    ::usleep(300000);  // let the victim see all of them before we drain anything (see docs/robustness.md)
    const VictimAnswer a = pc.receive(30s);
    Expect e = term(TerminateLayer::ddp, et::ddp_untagged_buffer, ec::ddp_untagged_invalid_msn_no_buffer, true, false);
    check_terminate(a, e, out);
    if (a.terminate) check_echoed_headers(*a.terminate, pc.last_ulpdu(), out);
    pc.close();
    check_victim(cx, serial, e, out);
}

void invalid_qn(Context& cx, Outcome& out)
{
    fpdu_attack(cx, out, "", term(TerminateLayer::ddp, et::ddp_untagged_buffer, ec::ddp_untagged_invalid_qn, true, false),
                [](PeerConnection& pc) { pc.send_fpdu(PeerConnection::untagged(0x3, 5, 1, 0), hello); });
}

void msn_gap(Context& cx, Outcome& out)
{
    Expect e = term(TerminateLayer::ddp, et::ddp_untagged_buffer, ec::ddp_untagged_invalid_msn_range, true, false);
    e.first_wc = "IBV_WC_SUCCESS byte_len=5";  // MSN 1 was fine
    fpdu_attack(cx, out, "", e,
                [](PeerConnection& pc) {
                    pc.send_fpdu(PeerConnection::untagged(0x3, 0, 1, 0), hello);
                    pc.send_fpdu(PeerConnection::untagged(0x3, 0, 3, 0), hello);  // MSN 2 skipped
                });
}

void mo_beyond_message(Context& cx, Outcome& out)
{
    fpdu_attack(cx, out, "", term(TerminateLayer::ddp, et::ddp_untagged_buffer, ec::ddp_untagged_invalid_mo, true, false),
                [](PeerConnection& pc) {
                    pc.send_fpdu(PeerConnection::untagged(0x3, 0, 1, 0, false), hello);
                    pc.send_fpdu(PeerConnection::untagged(0x3, 0, 1, 4096), hello);  // MO far past 5
                });
}

void send_too_large(Context& cx, Outcome& out)
{
    Expect e = term(TerminateLayer::ddp, et::ddp_untagged_buffer, ec::ddp_untagged_message_too_long, true, false,
                    {"DISCONNECTED"});
    e.first_wc = "IBV_WC_LOC_LEN_ERR";
    fpdu_attack(cx, out, "", e, [](PeerConnection& pc) {
        std::vector<uint8_t> d(1000, 0x42);
        pc.send_fpdu(PeerConnection::untagged(0x3, 0, 1, 0), d);
    });
}

void send_nothing_posted(Context& cx, Outcome& out)
{
    fpdu_attack(cx, out, "recv=0",
                term(TerminateLayer::ddp, et::ddp_untagged_buffer, ec::ddp_untagged_invalid_msn_no_buffer, true, false,
                     {"DISCONNECTED"}),
                [](PeerConnection& pc) { pc.send_fpdu(PeerConnection::untagged(0x3, 0, 1, 0), hello); });
}

// A Read Response nobody asked for (RFC 5040 §5.2.2).
void unsolicited_read_response(Context& cx, Outcome& out)
{
    fpdu_attack(cx, out, "",
                term(TerminateLayer::rdmap, et::rdmap_remote_operation, ec::rdmap_unexpected_opcode, true, false),
                [](PeerConnection& pc) {
                    pc.send_fpdu(PeerConnection::tagged(0x2, pc.victim().rw.stag, pc.victim().rw.addr), hello);
                });
}

// Send with Invalidate of an STag that does not exist (RFC 5040 §5.3,
// §7.2: Remote Protection "STag cannot be Invalidated"; R only for Reads).
void send_invalidate_unknown_stag(Context& cx, Outcome& out)
{
    fpdu_attack(cx, out, "",
                term(TerminateLayer::rdmap, et::rdmap_remote_protection, ec::rdmap_stag_cannot_be_invalidated, true,
                     false, {"DISCONNECTED"}),
                [](PeerConnection& pc) {
                    auto h = PeerConnection::untagged(0x4, 0, 1, 0);
                    const uint32_t bogus = pc.victim().rw.stag ^ 0x00A50000u;
                    h[2] = static_cast<uint8_t>(bogus >> 24);  // RsvdULP[8:39]: the Invalidate STag
                    h[3] = static_cast<uint8_t>(bogus >> 16);
                    h[4] = static_cast<uint8_t>(bogus >> 8);
                    h[5] = static_cast<uint8_t>(bogus);
                    pc.send_fpdu(h, hello);
                });
}

// After an attack the victim may answer with the Terminate `allowed` or
// with none, but must end the stream; then its receives flush and its ULP
// sees DISCONNECTED.
void expect_close_maybe_terminate(Context& cx, Outcome& out, PeerConnection& pc, int serial,
                                  const TerminateCode& allowed, const std::string& attack, const char* no_eof)
{
    const VictimAnswer a = pc.receive(10s);
    if (a.terminate && !(a.terminate->control.code == allowed))
        out.fail("Terminate " + code_text(a.terminate->control.code) + " for " + attack);
    if (!a.eof) out.fail(no_eof);
    pc.close();
    Expect e;
    e.victim = {"IBV_WC_WR_FLUSH_ERR", "DISCONNECTED"};
    check_victim(cx, serial, e, out);
}

// A Terminate shorter than its 4-octet control word (ULPDU_Length 20 < 22).
void short_terminate(Context& cx, Outcome& out)
{
    PeerConnection pc;
    const int serial = open_connection(cx, pc, "", out);
    if (!serial) return;
    auto h = PeerConnection::untagged(0x7, wire::rdmap_qn_terminate, 1, 0);
    const uint8_t two[] = {0x02, 0x00};
    pc.send_fpdu(h, two);
    // Either answer is defensible: 0/2/FF for the malformed message, or
    // silence because a Terminate is never answered with one.
    expect_close_maybe_terminate(cx, out, pc, serial,
                                 TerminateCode{TerminateLayer::rdmap, et::rdmap_remote_operation, ec::rdmap_unspecified},
                                 "a short Terminate", "the victim did not close the connection");
}

std::vector<uint8_t> terminate_fpdu_body(wire::TerminateLayout layout)
{
    std::vector<uint8_t> body(PeerConnection::untagged(0x7, wire::rdmap_qn_terminate, 1, 0));
    body.resize(body.size() + 4);
    wire::TerminateControl c;
    c.code = TerminateCode{TerminateLayer::rdmap, et::rdmap_remote_operation, ec::rdmap_unspecified};
    wire::encode_terminate_control(c, std::span<uint8_t, 4>(body.data() + 18, 4), layout);
    return body;
}

// A Terminate from the peer: the QP goes to ERROR, receives are flushed, and
// iwemu never answers a Terminate with a Terminate (RFC 5040 §5.4).
void peer_terminate(Context& cx, Outcome& out, wire::TerminateLayout layout)
{
    Expect e;
    e.victim = {"IBV_WC_WR_FLUSH_ERR", "DISCONNECTED", "IBV_EVENT_QP_FATAL"};
    fpdu_attack(cx, out, "", e, [layout](PeerConnection& pc) { pc.send_fpdu(terminate_fpdu_body(layout), {}); });
}

// Startup-phase abuse: the victim must close without a Reply, and the ULP
// never hears of it (no REQUEST line).
void startup_attack(Context& cx, Outcome& out, const std::vector<uint8_t>& what, bool close_after)
{
    PeerConnection pc;
    std::string err;
    if (!pc.connect_tcp(cx.port, 0, &err)) {
        out.fail(err);
        return;
    }
    const size_t mark = cx.victim->lines().size();
    if (!what.empty()) pc.send_raw(what);
    if (close_after) {
        pc.close();
    } else {
        const VictimAnswer a = pc.receive(12s);
        if (!a.eof) out.fail("the victim kept the connection open after a bad Request");
        if (!a.opcodes.empty()) out.fail("FPDUs in answer to a bad Request");
        pc.close();
    }
    cx.victim->pump(300ms);
    for (size_t i = mark; i < cx.victim->lines().size(); ++i)
        if (cx.victim->lines()[i].rfind("REQUEST", 0) == 0) out.fail("a bad Request reached the ULP");
}

void garbage_request(Context& cx, Outcome& out)
{
    startup_attack(cx, out, bytes("GET / HTTP/1.1\r\nHost: victim\r\n\r\n"), false);
}

void oversize_private_data(Context& cx, Outcome& out)
{
    std::vector<uint8_t> f(wire::mpa_request_key.begin(), wire::mpa_request_key.end());
    f.insert(f.end(), {0x40 | 0x10, 2, 0x02, 0x58});  // C, S, Rev 2, PD_Length 600 (> 512)
    f.insert(f.end(), {0x00, 0x10, 0x00, 0x10});
    f.resize(20 + 600, 'x');
    startup_attack(cx, out, f, false);
}

std::vector<uint8_t> request_bytes(uint8_t rev, bool s_bit, std::vector<uint8_t> pd, bool reply_key = false)
{
    const auto& key = reply_key ? wire::mpa_reply_key : wire::mpa_request_key;
    std::vector<uint8_t> f(key.begin(), key.end());
    f.push_back(static_cast<uint8_t>(0x40 | (s_bit ? 0x10 : 0)));
    f.push_back(rev);
    f.push_back(static_cast<uint8_t>(pd.size() >> 8));
    f.push_back(static_cast<uint8_t>(pd.size()));
    f.insert(f.end(), pd.begin(), pd.end());
    return f;
}

// RFC 6581 §10: a revision above ours is closed without a Reply.
void request_rev3(Context& cx, Outcome& out)
{
    startup_attack(cx, out, request_bytes(3, true, {0x00, 0x10, 0x00, 0x10}), false);
}

// Rev 2, S=1 but PD_Length 2: the enhanced data cannot be there (P2P-013).
void request_enhanced_data_missing(Context& cx, Outcome& out)
{
    startup_attack(cx, out, request_bytes(2, true, {0x00, 0x10}), false);
}

// The Reply key where a Request belongs (RFC 5044 §7.1.2: close).
void request_with_reply_key(Context& cx, Outcome& out)
{
    startup_attack(cx, out, request_bytes(2, true, {0x00, 0x10, 0x00, 0x10}, true), false);
}

// Peer-to-peer with no RTR type at all: the Responder rejects (R=1) itself
// (CHECKLIST decision 13); the ULP never sees the request.
void p2p_no_common_rtr(Context& cx, Outcome& out)
{
    PeerConnection pc;
    std::string err;
    if (!pc.connect_tcp(cx.port, 0, &err)) {
        out.fail(err);
        return;
    }
    const size_t mark = cx.victim->lines().size();
    pc.send_raw(request_bytes(2, true, {0x80, 0x10, 0x00, 0x10}));  // A=1, B=C=D=0
    std::vector<uint8_t> got;
    const auto deadline = std::chrono::steady_clock::now() + 10s;
    while (std::chrono::steady_clock::now() < deadline) {
        uint8_t b[600];
        const ssize_t n = ::recv(pc.fd(), b, sizeof(b), 0);
        if (n <= 0) break;
        got.insert(got.end(), b, b + n);
    }
    const auto r = wire::parse_mpa_frame(got, wire::MpaFrameType::reply, true);
    if (r.status != wire::MpaParseStatus::complete) out.fail("no well-formed Reply: " + std::string(wire::to_string(r.status)));
    else if (!r.frame.reject) out.fail("the Reply accepts a peer-to-peer Request without RTR types");
    else if (!r.frame.enhanced || !r.frame.enhanced->peer_to_peer ||
             !(r.frame.enhanced->zero_length_write_rtr || r.frame.enhanced->zero_length_read_rtr ||
               r.frame.enhanced->zero_length_send_rtr))
        out.fail("the rejecting Reply does not say which RTR types the Responder supports");
    pc.close();
    cx.victim->pump(300ms);
    for (size_t i = mark; i < cx.victim->lines().size(); ++i)
        if (cx.victim->lines()[i].rfind("REQUEST", 0) == 0) out.fail("the request reached the ULP");
}

void truncated_request(Context& cx, Outcome& out)
{
    std::vector<uint8_t> f(wire::mpa_request_key.begin(), wire::mpa_request_key.begin() + 10);
    startup_attack(cx, out, f, true);
}

void immediate_close(Context& cx, Outcome& out) { startup_attack(cx, out, {}, true); }

// Half an FPDU, then FIN: the victim sees the stream end (no crash, flushed
// receives, DISCONNECTED).
void truncated_stream(Context& cx, Outcome& out)
{
    PeerConnection pc;
    const int serial = open_connection(cx, pc, "", out);
    if (!serial) return;
    auto f = pc.fpdu(PeerConnection::untagged(0x3, 0, 1, 0), hello);
    f.resize(f.size() / 2);
    pc.send_raw(f);
    pc.shutdown_write();
    expect_close_maybe_terminate(cx, out, pc, serial,
                                 TerminateCode{TerminateLayer::llp, et::llp_mpa, ec::mpa_tcp_connection_lost},
                                 "a truncated stream", "victim did not close after the peer's FIN");
}

// Established, then gone at once (FIN or RST) before any FPDU.
void close_after_startup(Context& cx, Outcome& out, bool abortive)
{
    PeerConnection pc;
    const int serial = open_connection(cx, pc, "", out);
    if (!serial) return;
    if (abortive) pc.close_abortive();
    else pc.close();
    Expect e;
    e.victim = {"DISCONNECTED"};
    check_victim(cx, serial, e, out);
}

// 1,000 connections opened and dropped in every startup phase.
void many_connections(Context& cx, Outcome& out)
{
    std::vector<uint8_t> req;
    {
        wire::MpaFrame r;
        r.type = wire::MpaFrameType::request;
        r.crc = true;
        r.rev = 2;
        r.enhanced = wire::MpaEnhancedData{false, false, 16, false, false, 16};
        static const char pd[] = "hostile#drop";
        r.private_data = {reinterpret_cast<const uint8_t*>(pd), sizeof(pd) - 1};
        req.resize(r.wire_size());
        wire::encode_mpa_frame(r, req);
    }
    const auto t0 = std::chrono::steady_clock::now();
    int connected = 0;
    for (int i = 0; i < 1000; ++i) {
        PeerConnection pc;
        std::string err;
        if (!pc.connect_tcp(cx.port, 0, &err)) {
            out.fail("connection " + std::to_string(i) + ": " + err);
            break;
        }
        ++connected;
        switch (i % 5) {
        case 0: pc.close(); break;                             // nothing sent
        case 1: pc.close_abortive(); break;                    // RST
        case 2: pc.send_raw(std::span(req).first(30)); pc.close(); break;  // half a Request
        case 3: pc.send_raw(req); pc.close_abortive(); break;  // Request, then RST before the Reply
        case 4: {                                              // full startup, then RST
            if (!pc.mpa_startup("hostile#drop", &err)) out.fail("connection " + std::to_string(i) + ": " + err);
            pc.close_abortive();
            break;
        }
        }
        if (i % 50 == 0) cx.victim->pump(0ms);
        if (!cx.victim->alive()) {
            out.fail("victim died after " + std::to_string(i + 1) + " connections: " + cx.victim->status());
            return;
        }
    }
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    std::printf("  %d connections in %.1f s\n", connected, s);
    // Every accepted one must be finished by the victim (DONE), canaries intact.
    const auto deadline = std::chrono::steady_clock::now() + 30s;
    size_t requests = 0, done = 0;
    for (;;) {
        cx.victim->pump(100ms);
        requests = done = 0;
        for (const auto& l : cx.victim->lines()) {
            if (l.rfind("REQUEST", 0) == 0 && l.find("hostile#drop") != std::string::npos) ++requests;
        }
        for (const auto& l : cx.victim->lines())
            if (l.rfind("DONE conn=", 0) == 0) ++done;
        if (std::chrono::steady_clock::now() > deadline) break;
        // All connections of this run finished: each REQUEST has its DONE (other scenarios' too).
        size_t all_req = 0;
        for (const auto& l : cx.victim->lines())
            if (l.rfind("REQUEST", 0) == 0) ++all_req;
        if (done >= all_req) break;
    }
    std::printf("  victim saw %zu connect requests of this run\n", requests);
    for (const auto& l : cx.victim->lines())
        if (l.find("CORRUPT") != std::string::npos) out.fail(l);
    size_t all_req = 0;
    for (const auto& l : cx.victim->lines())
        if (l.rfind("REQUEST", 0) == 0) ++all_req;
    if (done < all_req) out.fail(std::to_string(all_req - done) + " accepted connections never finished");
}

const std::map<std::string, Scenario>& scenarios()
{
    static const std::map<std::string, Scenario> s = {
        {"good", good},
        {"bad_crc", bad_crc},
        {"ulpdu_length_zero", ulpdu_length_zero},
        {"ulpdu_length_short", ulpdu_length_short},
        {"ulpdu_length_too_long", ulpdu_length_too_long},
        {"ulpdu_length_oversize", ulpdu_length_oversize},
        {"ddp_version_untagged", ddp_version_untagged},
        {"ddp_version_tagged", ddp_version_tagged},
        {"rdmap_version", rdmap_version},
        {"unknown_opcode", unknown_opcode},
        {"invalid_stag", invalid_stag},
        {"write_beyond_end", write_beyond_end},
        {"write_below_base", write_below_base},
        {"write_to_wrap", write_to_wrap},
        {"write_without_right", write_without_right},
        {"read_without_right", read_without_right},
        {"read_invalid_stag", read_invalid_stag},
        {"read_out_of_bounds", read_out_of_bounds},
        {"reads_beyond_ird", [](Context& c, Outcome& o) { reads_beyond_ird(c, o, false); }},
        // The same with a victim that keeps its QP for 5 s after DISCONNECTED.
        {"reads_beyond_ird_patient_victim", [](Context& c, Outcome& o) { reads_beyond_ird(c, o, true); }},
        {"invalid_qn", invalid_qn},
        {"msn_gap", msn_gap},
        {"mo_beyond_message", mo_beyond_message},
        {"send_too_large", send_too_large},
        {"send_nothing_posted", send_nothing_posted},
        {"peer_terminate", [](Context& c, Outcome& o) { peer_terminate(c, o, wire::TerminateLayout::rfc5040); }},
        {"peer_terminate_siw_layout",
         [](Context& c, Outcome& o) { peer_terminate(c, o, wire::TerminateLayout::linux_siw_bitfield); }},
        {"garbage_request", garbage_request},
        {"oversize_private_data", oversize_private_data},
        {"truncated_request", truncated_request},
        {"immediate_close", immediate_close},
        {"truncated_stream", truncated_stream},
        {"close_after_startup", [](Context& c, Outcome& o) { close_after_startup(c, o, false); }},
        {"reset_after_startup", [](Context& c, Outcome& o) { close_after_startup(c, o, true); }},
        {"many_connections", many_connections},
        {"unsolicited_read_response", unsolicited_read_response},
        {"send_invalidate_unknown_stag", send_invalidate_unknown_stag},
        {"short_terminate", short_terminate},
        {"request_rev3", request_rev3},
        {"request_enhanced_data_missing", request_enhanced_data_missing},
        {"request_with_reply_key", request_with_reply_key},
        {"p2p_no_common_rtr", p2p_no_common_rtr},
    };
    return s;
}

uint16_t free_port()
{
    const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    ::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a));
    socklen_t len = sizeof(a);
    ::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len);
    ::close(fd);
    return ntohs(a.sin_port);
}

int run(const std::string& iwemu_run, const std::string& victim_bin, const std::vector<std::string>& names)
{
    Context cx;
    // HOSTILE_PORT: a fixed victim port (tests/conformance/terminates.sh captures it).
    const char* fixed = std::getenv("HOSTILE_PORT");
    cx.port = fixed ? static_cast<uint16_t>(std::atoi(fixed)) : free_port();
    VictimProcess victim({iwemu_run, victim_bin, std::to_string(cx.port)});
    std::string err;
    if (!victim.start(&err) || !victim.wait_for({"LISTEN port="}, 20s)) {
        std::fprintf(stderr, "victim did not start: %s\n", err.c_str());
        for (const auto& l : victim.lines()) std::fprintf(stderr, "victim: %s\n", l.c_str());
        return 1;
    }
    cx.victim = &victim;
    int failures = 0;
    auto one = [&](const std::string& name) {
        Outcome out;
        scenarios().at(name)(cx, out);
        if (!victim.alive()) out.fail("victim died: " + victim.status());
        std::printf("%s %s%s%s\n", out.ok ? "PASS" : "FAIL", name.c_str(), out.ok ? "" : ": ", out.why.c_str());
        std::fflush(stdout);
        if (!out.ok) ++failures;
        return out.ok;
    };
    for (const auto& n : names) {
        if (!victim.alive()) break;
        one(n);
        // The victim keeps serving: a well-behaved connection after each attack.
        if (n != "good" && victim.alive()) {
            Outcome out;
            good(cx, out);
            if (!out.ok) {
                std::printf("FAIL %s: victim does not serve a good connection afterwards: %s\n", n.c_str(),
                            out.why.c_str());
                ++failures;
            }
        }
    }
    const bool clean = victim.stop();
    if (!clean) {
        std::printf("FAIL victim exit: %s\n", victim.status().c_str());
        ++failures;
    }
    if (failures || std::getenv("HOSTILE_VERBOSE"))
        for (const auto& l : victim.lines()) std::printf("victim: %s\n", l.c_str());
    std::printf("%s: %d failure(s)\n", failures ? "FAILED" : "OK", failures);
    return failures ? 1 : 0;
}

}  // namespace
}  // namespace iwemu::robustness

int main(int argc, char** argv)
{
    using namespace iwemu::robustness;
    signal(SIGPIPE, SIG_IGN);
    if (argc == 2 && std::string(argv[1]) == "list") {
        for (const auto& [n, _] : scenarios()) std::printf("%s\n", n.c_str());
        return 0;
    }
    if (argc < 4) {
        std::fprintf(stderr, "usage: hostile_peer IWEMU_RUN VICTIM_SERVER SCENARIO...|all\n       hostile_peer list\n");
        return 2;
    }
    std::vector<std::string> names;
    for (int i = 3; i < argc; ++i) {
        const std::string n = argv[i];
        if (n == "all") {
            for (const auto& [k, _] : scenarios())
                if (k != "many_connections") names.push_back(k);
        } else if (scenarios().count(n)) {
            names.push_back(n);
        } else {
            std::fprintf(stderr, "unknown scenario %s (hostile_peer list)\n", n.c_str());
            return 2;
        }
    }
    return run(argv[1], argv[2], names);
}
