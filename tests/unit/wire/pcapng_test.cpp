// pcapng writer and reader, Ethernet/IP/TCP synthesis and the capture's
// unit framing (emulator/wire/pcapng.h, tcp_frame.h, capture_framing.h).
// The writer is judged by reading back with tshark where it is installed.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <string>

#include "emulator/wire/capture_framing.h"
#include "emulator/wire/pcapng.h"
#include "emulator/wire/tcp_frame.h"

namespace iwemu::wire {
namespace {

tcpframe::Segment segment(uint32_t seq, uint8_t flags)
{
    tcpframe::Segment s;
    s.src.addr = {127, 0, 0, 1};
    s.dst.addr = {127, 0, 0, 2};
    s.src.port = 40000;
    s.dst.port = 14444;
    s.seq = seq;
    s.ack = 77;
    s.flags = flags;
    return s;
}

std::vector<uint8_t> frame_of(const tcpframe::Segment& s, std::span<const uint8_t> payload)
{
    std::vector<uint8_t> f(tcpframe::max_headers + payload.size());
    const size_t h = tcpframe::build_headers(s, payload, f.data());
    std::copy(payload.begin(), payload.end(), f.begin() + static_cast<std::ptrdiff_t>(h));
    f.resize(h + payload.size());
    return f;
}

TEST(Pcapng, WrittenBlocksReadBack)
{
    std::vector<uint8_t> file;
    pcapng::append_section_header(file, "iwemu");
    pcapng::append_interface(file, pcapng::linktype_ethernet, 262144, "iwemu");
    const uint8_t payload[5] = {1, 2, 3, 4, 5};
    const auto f = frame_of(segment(1000, tcpframe::ack | tcpframe::psh), payload);
    pcapng::append_enhanced_packet(file, 0, 1234567, f, static_cast<uint32_t>(f.size()), "iwemu qp=42");
    pcapng::append_enhanced_packet(file, 0, 1234568, {f.data(), 60}, static_cast<uint32_t>(f.size()));
    ASSERT_EQ(file.size() % 4, 0u);
    const auto r = pcapng::read_capture(file);
    ASSERT_TRUE(r.error.empty()) << r.error;
    ASSERT_EQ(r.packets.size(), 2u);
    EXPECT_EQ(r.packets[0].timestamp_us, 1234567u);
    EXPECT_EQ(r.packets[0].comment, "iwemu qp=42");
    EXPECT_EQ(r.packets[1].data.size(), 60u);
    EXPECT_EQ(r.packets[1].original_length, f.size());
    const auto p = tcpframe::parse_frame(r.packets[0].linktype, r.packets[0].data);
    ASSERT_TRUE(p);
    EXPECT_EQ(p->seg.seq, 1000u);
    EXPECT_EQ(p->seg.ack, 77u);
    EXPECT_EQ(p->seg.src.port, 40000);
    EXPECT_EQ(p->seg.dst.port, 14444);
    ASSERT_EQ(p->payload.size(), 5u);
    EXPECT_EQ(p->payload[4], 5);
}

TEST(Pcapng, TruncatedOrForeignFilesAreErrors)
{
    std::vector<uint8_t> file;
    pcapng::append_section_header(file, "x");
    pcapng::append_interface(file, pcapng::linktype_ethernet, 65535, "");
    file.resize(file.size() - 3);
    EXPECT_FALSE(pcapng::read_capture(file).error.empty());
    const uint8_t junk[8] = {'h', 'e', 'l', 'l', 'o', 0, 0, 0};
    EXPECT_FALSE(pcapng::read_capture(junk).error.empty());
    // An enhanced packet naming an interface the section does not have.
    std::vector<uint8_t> bad;
    pcapng::append_section_header(bad, "x");
    const uint8_t one = 1;
    pcapng::append_enhanced_packet(bad, 0, 0, {&one, 1}, 1);
    EXPECT_FALSE(pcapng::read_capture(bad).error.empty());
}

TEST(TcpFrame, ChecksumsVerify)
{
    const uint8_t payload[7] = {9, 8, 7, 6, 5, 4, 3};  // odd length
    const auto f = frame_of(segment(5, tcpframe::ack), payload);
    // One's-complement sum over the IPv4 header is 0xFFFF when its checksum is right.
    uint32_t sum = 0;
    for (size_t i = 14; i < 34; i += 2) sum += uint32_t(f[i]) << 8 | f[i + 1];
    while (sum >> 16) sum = (sum & 0xFFFF) + (sum >> 16);
    EXPECT_EQ(sum, 0xFFFFu);
    // TCP: pseudo header + segment.
    sum = 0;
    for (size_t i = 26; i < 34; i += 2) sum += uint32_t(f[i]) << 8 | f[i + 1];
    sum += 6 + (f.size() - 34);
    for (size_t i = 34; i < f.size(); i += 2) sum += uint32_t(f[i]) << 8 | (i + 1 < f.size() ? f[i + 1] : 0);
    while (sum >> 16) sum = (sum & 0xFFFF) + (sum >> 16);
    EXPECT_EQ(sum, 0xFFFFu);
}

TEST(TcpFrame, Ipv6RoundTrip)
{
    tcpframe::Segment s = segment(1, tcpframe::syn);
    s.src.v6 = s.dst.v6 = true;
    s.src.addr = {0xfe, 0x80, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1};
    s.dst.addr = {0xfe, 0x80, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 2};
    const auto f = frame_of(s, {});
    const auto p = tcpframe::parse_frame(pcapng::linktype_ethernet, f);
    ASSERT_TRUE(p);
    EXPECT_TRUE(p->seg.src.v6);
    EXPECT_EQ(p->seg.src, s.src);
    EXPECT_EQ(p->seg.flags, tcpframe::syn);
    EXPECT_FALSE(tcpframe::parse_frame(pcapng::linktype_ethernet, {f.data(), 30}));
}

TEST(CaptureFraming, StartupFrameThenFpdus)
{
    CaptureFraming fr;
    std::vector<uint8_t> req = {'M', 'P', 'A', ' ', 'I', 'D', ' ', 'R', 'e', 'q', ' ', 'F', 'r', 'a', 'm', 'e',
                                0x40, 0x02, 0x00, 0x04, 1, 2, 3, 4};
    EXPECT_EQ(fr.unit_length({req.data(), 7}), 0u);
    EXPECT_EQ(fr.unit_length({req.data(), 19}), 0u);
    EXPECT_EQ(fr.unit_length(req), 24u);
    fr.unit_taken(req);
    EXPECT_FALSE(fr.marker_flag());
    // ULPDU_Length 14 -> 2 + 14 + PAD 0 + CRC 4 = 20; 15 -> 2 + 15 + 3 + 4 = 24.
    const uint8_t f14[8] = {0, 14, 0xC1, 0x40, 0, 0, 0, 0};
    EXPECT_EQ(fr.unit_length(f14), 20u);
    fr.unit_taken(f14);
    const uint8_t f15[2] = {0, 15};
    EXPECT_EQ(fr.unit_length(f15), 24u);
    EXPECT_EQ(fr.unit_length({f15, 1}), 0u);
}

TEST(CaptureFraming, NotMpaPassesThrough)
{
    CaptureFraming fr;
    const uint8_t junk[10] = {'G', 'E', 'T', ' ', '/', ' ', 'H', 'T', 'T', 'P'};
    EXPECT_EQ(fr.unit_length(junk), 10u);
    fr.unit_taken(junk);
    EXPECT_TRUE(fr.passing_through());
}

TEST(CaptureFraming, ElisionKeepsHeaders)
{
    std::vector<uint8_t> write(2 + 14 + 100 + 4, 0);
    write[2] = 0xC1;  // T, L, DV 1
    write[3] = 0x40;  // RDMAP v1, Write
    EXPECT_EQ(fpdu_header_length(write), 16u);
    std::vector<uint8_t> send(2 + 18 + 100 + 4, 0);
    send[2] = 0x41;
    send[3] = 0x43;
    EXPECT_EQ(fpdu_header_length(send), 20u);
    std::vector<uint8_t> rreq(2 + 18 + 28 + 4, 0);
    rreq[2] = 0x41;
    rreq[3] = 0x41;
    EXPECT_EQ(fpdu_header_length(rreq), rreq.size());
    send[2] = 0xC1;  // tagged Send: contradictory, kept whole
    EXPECT_EQ(fpdu_header_length(send), send.size());
}

// tshark, where installed, reads our file as a capture of a TCP connection.
TEST(Pcapng, TsharkReadsIt)
{
    if (std::system("command -v tshark >/dev/null 2>&1") != 0) GTEST_SKIP() << "tshark not installed";
    std::vector<uint8_t> file;
    pcapng::append_section_header(file, "iwemu");
    pcapng::append_interface(file, pcapng::linktype_ethernet, 262144, "iwemu");
    auto s = segment(100, tcpframe::syn);
    pcapng::append_enhanced_packet(file, 0, 1000, frame_of(s, {}), 54);
    const uint8_t data[3] = {'a', 'b', 'c'};
    s.seq = 101;
    s.flags = tcpframe::ack | tcpframe::psh;
    const auto f = frame_of(s, data);
    pcapng::append_enhanced_packet(file, 0, 2000, f, static_cast<uint32_t>(f.size()), "iwemu qp=7");
    char path[] = "/tmp/iwemu-pcapng-XXXXXX";
    const int fd = mkstemp(path);
    ASSERT_GE(fd, 0);
    ASSERT_EQ(write(fd, file.data(), file.size()), static_cast<ssize_t>(file.size()));
    close(fd);
    const std::string cmd = std::string("tshark -n -r ") + path +
                            " -T fields -e tcp.srcport -e tcp.len -e tcp.checksum.status -e ip.checksum.status"
                            " -e frame.comment -o tcp.check_checksum:TRUE -o ip.check_checksum:TRUE 2>/dev/null";
    FILE* p = popen(cmd.c_str(), "r");
    ASSERT_TRUE(p);
    std::string out;
    char buf[256];
    while (fgets(buf, sizeof buf, p)) out += buf;
    const int rc = pclose(p);
    unlink(path);
    ASSERT_EQ(rc, 0) << out;
    // checksum.status: 0 bad, 1 good, 2 unverified (Wireshark proto_checksum_enum_e).
    EXPECT_EQ(out, "40000\t0\t1\t1\t\n40000\t3\t1\t1\tiwemu qp=7\n");
}

}  // namespace
}  // namespace iwemu::wire
