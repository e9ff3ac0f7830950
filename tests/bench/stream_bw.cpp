// stream_bw: the ceiling of a one-connection bandwidth stream over loopback
// TCP, with and without MPA's framing, no iwemu.
//
// iwemu must frame every message into FPDUs of at most MULPDU octets
// (RFC 5044 §4.5: the EMSS, never above 64768 since ULPDU_Length is 16
// bits), and its receiver must validate each DDP header before it places
// that segment's payload (RFC 5041 §7.1), so it can read across no FPDU
// boundary straight into user memory.  UCX and libfabric send a message
// as one piece and read it to its end.  This program is both streams with
// nothing else on the path, so the benchmark matrix can tell what the
// framing costs from what iwemu costs:
//
//   --framing mpa   untagged Send FPDUs as iwemu lays them out (20-octet
//                   header, payload of MULPDU - 18 octets from the
//                   connection's TCP_MAXSEG, PAD, CRC field), `--batch`
//                   FPDUs per blocking sendmsg() (iwemu's TX batch: 16);
//                   the receiver spins on non-blocking reads and reads
//                   each payload straight into its target with a 512-octet
//                   staging tail for the trailer and the next header,
//                   checking every header (iwemu's receive pattern from a
//                   peer on another host; from one on the same host iwemu
//                   reads with a 64 KiB look-ahead, `--tail 65536`).
//                   `--crc` computes and checks CRC-32C as MPA does.
//   --framing none  one sendmsg() per message; the receiver spins on
//                   non-blocking reads up to the message's end.
//
// More options take the framing's cost apart (measurements, not all of
// them receivers an RNIC could use): `--read-max N` caps every read at N
// octets (the unframed stream read like FPDUs); `--rx opaque` reads the MPA
// stream to each message's end without parsing it (the framed sender
// alone); `--tail N` makes the staging tail N octets (a look-ahead whose
// payload octets are then copied into place); `--rx peek` peeks at the
// next headers first (SO_PEEK_OFF, Linux 6.9 or later) and then reads
// several FPDUs' payloads straight into place in one call; `--tx-bounce N`
// makes the sender copy its FPDUs one behind the other into an N-octet
// buffer and send that (the kernel then copies from a hot buffer whose
// payloads keep their stream alignment).
//
//   stream_bw [-p PORT] [-s SIZE] [-n ITERS] [--cc NAME] [--framing mpa|none] [--crc] [--batch N]
//             [--read-max N] [--tail N] [--rx fpdu|opaque|peek] [--tx-bounce N] [HOST]
//
// --cc sets the connection's TCP congestion control (perftest-configs runs
// the streams with the one iwemu chooses on loopback, docs/configuration.md).
//
// without HOST it is the server (receives), with HOST the client (sends).
// Both ends need the same options.  The receiver times the messages after
// the first tenth (warm-up) and reports the time to the client, which
// prints "stream_bw FRAMING SIZE ITERS MB/s" (10^6 octets per second).

#include <netinet/tcp.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "emulator/wire/crc32c.h"
#include "emulator/wire/ddp_header.h"
#include "emulator/wire/fpdu.h"
#include "emulator/wire/rdmap_opcode.h"
#include "tests/bench/tcp_pair.h"

namespace {

namespace wire = iwemu::wire;

constexpr size_t fpdu_header_size = wire::mpa_ulpdu_length_size + wire::ddp_untagged_header_size;
constexpr size_t default_tail = 512;  // iwemu's rx_lookahead with a peer on another host

struct Options : tcp_pair::CommonArgs {  // host empty: server (the receiver)
  Options() {
    port = "18516";
    size = 1 << 20;
    iters = 1000;
  }
  bool mpa = true;
  bool crc = false;
  unsigned batch = 16;
  size_t read_max = SIZE_MAX;
  size_t tail = default_tail;
  size_t tx_bounce = 0;  // 0: FPDUs gathered from the message buffer
  enum class Rx { fpdu, opaque, peek } rx = Rx::fpdu;
};


size_t g_read_max = SIZE_MAX;

[[noreturn]] void die(const char* what) { tcp_pair::die("stream_bw", what); }

[[noreturn]] void fail(const char* what, unsigned long long detail) {
  std::fprintf(stderr, "stream_bw: %s %llu\n", what, detail);
  std::exit(1);
}

[[noreturn]] void usage() {
  std::fprintf(stderr,
               "usage: stream_bw [-p PORT] [-s SIZE] [-n ITERS] [--cc NAME] [--framing mpa|none] [--crc] "
               "[--batch N] [--read-max N] [--tail N] [--rx fpdu|opaque|peek] [--tx-bounce N] [HOST]\n");
  std::exit(2);
}

Options parse(int argc, char** argv) {
  Options o;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    auto value = [&]() -> const char* {
      if (i + 1 >= argc) usage();
      return argv[++i];
    };
    if (tcp_pair::take_common_arg(a, value, o)) {
      continue;
    } else if (a == "--framing") {
      std::string f = value();
      if (f != "mpa" && f != "none") usage();
      o.mpa = f == "mpa";
    } else if (a == "--crc") {
      o.crc = true;
    } else if (a == "--batch") {
      o.batch = static_cast<unsigned>(std::strtoul(value(), nullptr, 10));
    } else if (a == "--read-max") {
      o.read_max = std::strtoul(value(), nullptr, 10);
    } else if (a == "--tx-bounce") {
      o.tx_bounce = std::strtoul(value(), nullptr, 10);
    } else if (a == "--tail") {
      o.tail = std::strtoul(value(), nullptr, 10);
    } else if (a == "--rx") {
      std::string rx = value();
      if (rx == "fpdu")
        o.rx = Options::Rx::fpdu;
      else if (rx == "opaque")
        o.rx = Options::Rx::opaque;
      else if (rx == "peek")
        o.rx = Options::Rx::peek;
      else
        usage();
    } else {
      usage();
    }
  }
  // MO and the message length are 32-bit on the wire.
  if (o.size == 0 || o.size > (64u << 20) || o.iters < 2 || o.batch == 0 || o.batch > 64) usage();
  if ((o.crc || o.rx != Options::Rx::fpdu) && !o.mpa) usage();
  if (o.crc && o.rx == Options::Rx::peek) usage();
  if (o.tx_bounce != 0 && (!o.mpa || o.tx_bounce < (wire::mpa_mulpdu_max + 64) || o.tx_bounce > (64u << 20))) usage();
  if (o.tail < fpdu_header_size + 8 || o.tail > (1u << 20) || o.read_max < o.tail) usage();
  return o;
}

int connect_or_accept(const Options& o) { return tcp_pair::connect_or_accept("stream_bw", o.host, o.port, o.cc); }

// Blocking sendmsg() of the whole iovec list (which it may advance).
void send_iov(int fd, iovec* iov, size_t cnt) {
  while (cnt > 0) {
    msghdr msg{};
    msg.msg_iov = iov;
    msg.msg_iovlen = cnt;
    ssize_t k = sendmsg(fd, &msg, MSG_NOSIGNAL);
    if (k < 0 && errno == EINTR) continue;
    if (k <= 0) die("sendmsg");
    auto left = static_cast<size_t>(k);
    while (cnt > 0 && left >= iov->iov_len) {
      left -= iov->iov_len;
      ++iov;
      --cnt;
    }
    if (cnt > 0) {
      iov->iov_base = static_cast<char*>(iov->iov_base) + left;
      iov->iov_len -= left;
    }
  }
}

// Non-blocking read retried until it returns data: the polling receiver.
size_t spin_recvmsg(int fd, iovec* iov, size_t cnt) {
  if (iov[0].iov_len > g_read_max) {  // --read-max: the first piece only, no tail
    iov[0].iov_len = g_read_max;
    cnt = 1;
  }
  for (;;) {
    msghdr msg{};
    msg.msg_iov = iov;
    msg.msg_iovlen = cnt;
    ssize_t k = recvmsg(fd, &msg, MSG_DONTWAIT);
    if (k > 0) return static_cast<size_t>(k);
    if (k == 0) fail("peer closed early", 0);
    if (errno != EAGAIN && errno != EINTR) die("recvmsg");
  }
}

uint32_t payload_per_fpdu(int fd) {
  int mss = 0;
  socklen_t len = sizeof mss;
  if (getsockopt(fd, IPPROTO_TCP, TCP_MAXSEG, &mss, &len) != 0 || mss <= 0) die("TCP_MAXSEG");
  return wire::mpa_mulpdu(static_cast<uint32_t>(mss), false) - wire::ddp_untagged_header_size;
}

// ---------------------------------------------------------------- sender

void send_unframed(int fd, const Options& o, const std::vector<uint8_t>& buf) {
  for (unsigned m = 0; m < o.iters; ++m) {
    iovec iov{const_cast<uint8_t*>(buf.data()), buf.size()};
    send_iov(fd, &iov, 1);
  }
}

// Untagged Send FPDUs (RFC 5041 §4.3, RFC 5040 §4.1), QN 0, MSN from 1.
void send_mpa(int fd, const Options& o, const std::vector<uint8_t>& buf) {
  const uint32_t per_fpdu = payload_per_fpdu(fd);
  const wire::FpduFraming framing{o.crc, false};
  std::vector<wire::FpduGather> gathers(o.batch);
  std::vector<iovec> iov(o.batch * wire::FpduGather::max_iov(1));
  size_t in_batch = 0, iov_cnt = 0;
  uint32_t stream_offset = 0;
  std::vector<uint8_t> bounce(o.tx_bounce);
  size_t bounced = 0;
  auto send_bounce = [&] {
    iovec whole{bounce.data(), bounced};
    send_iov(fd, &whole, 1);
    bounced = 0;
  };
  for (uint32_t msn = 1; msn <= o.iters; ++msn) {
    for (size_t mo = 0; mo < buf.size();) {
      const size_t len = std::min<size_t>(per_fpdu, buf.size() - mo);
      wire::DdpHeader h;
      h.control = {false, mo + len == buf.size(), 0, wire::ddp_version};
      h.rsvdulp0 = wire::encode_rdmap_control(wire::RdmapOpcode::send);
      h.qn = 0;
      h.msn = msn;
      h.mo = static_cast<uint32_t>(mo);
      uint8_t hdr[wire::ddp_untagged_header_size];
      wire::encode_ddp_header(h, hdr);
      const std::span<const uint8_t> slice(buf.data() + mo, len);
      wire::FpduGather& g = gathers[in_batch];
      if (g.build(hdr, {&slice, 1}, stream_offset, framing, {iov.data() + iov_cnt, iov.size() - iov_cnt}) !=
          wire::FpduGather::Status::ok)
        fail("FPDU layout", mo);
      stream_offset = g.next_stream_offset();
      mo += len;
      if (!bounce.empty()) {  // --tx-bounce: the FPDU copied behind the ones before it
        if (bounced + g.wire_length() > bounce.size()) send_bounce();
        for (const iovec& v : std::span<const iovec>(iov.data(), g.iov_count())) {
          std::memcpy(bounce.data() + bounced, v.iov_base, v.iov_len);
          bounced += v.iov_len;
        }
        continue;
      }
      iov_cnt += g.iov_count();
      if (++in_batch == o.batch) {
        send_iov(fd, iov.data(), iov_cnt);
        in_batch = iov_cnt = 0;
      }
    }
  }
  if (iov_cnt > 0) send_iov(fd, iov.data(), iov_cnt);
  if (bounced > 0) send_bounce();
}

// ---------------------------------------------------------------- receiver

// On-wire octets of one message framed by send_mpa().
size_t mpa_message_wire_length(size_t size, uint32_t per_fpdu) {
  size_t n = 0;
  for (size_t mo = 0; mo < size; mo += per_fpdu)
    n += wire::mpa_fpdu_wire_length(wire::ddp_untagged_header_size + std::min<size_t>(per_fpdu, size - mo), false);
  return n;
}

void receive_unframed(int fd, std::vector<uint8_t>& target) {
  for (size_t got = 0; got < target.size();) {
    iovec iov{target.data() + got, target.size() - got};
    got += spin_recvmsg(fd, &iov, 1);
  }
}

// Reads one message of Send FPDUs into `target`, checking each header (and
// CRC) before its payload is placed.  `staging` holds octets read ahead:
// [pos, end).  With `peek` (Linux >= 6.9: SO_PEEK_OFF on TCP), the headers
// behind the current payload are peeked at and checked first, so one read
// places several payloads straight into the target.
struct MpaReceiver {
  int fd;
  bool crc;
  size_t tail;
  bool peek;
  uint32_t msn = 1;
  std::vector<uint8_t> staging = std::vector<uint8_t>(4096 + 2 * tail);
  size_t pos = 0, end = 0;

  struct Segment {
    size_t plen = 0, pad = 0, mo = 0;
    bool last = false;
  };

  void fill_staging(size_t need) {
    if (end - pos >= need) return;
    std::memmove(staging.data(), staging.data() + pos, end - pos);
    end -= pos;
    pos = 0;
    while (end < need) {
      iovec iov{staging.data() + end, tail};
      end += spin_recvmsg(fd, &iov, 1);
    }
  }

  // RFC 5041 §4.3 header of an untagged Send FPDU of this message.
  Segment check_header(const uint8_t* f, size_t message_size) const {
    const size_t ulpdu_length = size_t{f[0]} << 8 | f[1];
    const auto h = wire::decode_ddp_header({f + wire::mpa_ulpdu_length_size, wire::ddp_untagged_header_size});
    if (!h || h->control.tagged || h->control.dv != wire::ddp_version || h->qn != 0 || h->msn != msn ||
        ulpdu_length < wire::ddp_untagged_header_size || ulpdu_length > wire::mpa_mulpdu_max)
      fail("unexpected FPDU header at MSN", msn);
    const size_t plen = ulpdu_length - wire::ddp_untagged_header_size;
    if (h->mo > message_size || plen > message_size - h->mo) fail("segment beyond the message, MO", h->mo);
    return {plen, wire::mpa_pad_length(ulpdu_length), h->mo, h->control.last};
  }

  // Peeks at the headers behind the current segment's payload (its octets
  // from `placed` on unread) while they have arrived, and reads them with
  // their payloads in one call.  Leaves `seg` and `placed` at the segment the
  // read ended in; false if no header could be peeked.
  bool read_ahead(std::vector<uint8_t>& target, Segment& seg, size_t& placed) {
    constexpr int max_ahead = 16;
    uint8_t trailers[max_ahead][3 + wire::mpa_crc_size + fpdu_header_size];
    iovec iov[1 + 2 * max_ahead];
    iov[0] = {target.data() + seg.mo + placed, seg.plen - placed};
    size_t cnt = 1, offset = seg.plen - placed, header_end = 0;
    Segment cur = seg;
    int ahead = 0;
    while (!cur.last && ahead < max_ahead) {
      const int at = static_cast<int>(offset + cur.pad + wire::mpa_crc_size);
      uint8_t f[fpdu_header_size];
      if (setsockopt(fd, SOL_SOCKET, SO_PEEK_OFF, &at, sizeof at) != 0) die("SO_PEEK_OFF");
      if (recv(fd, f, sizeof f, MSG_PEEK | MSG_DONTWAIT) != static_cast<ssize_t>(sizeof f)) break;
      const Segment next = check_header(f, target.size());
      if (next.mo != cur.mo + cur.plen) fail("segment out of order, MO", next.mo);
      iov[cnt++] = {trailers[ahead], cur.pad + wire::mpa_crc_size + fpdu_header_size};
      iov[cnt++] = {target.data() + next.mo, next.plen};
      header_end = static_cast<size_t>(at) + fpdu_header_size;
      offset = header_end + next.plen;
      cur = next;
      ++ahead;
    }
    if (ahead == 0) return false;
    // Everything up to the last peeked header is in the socket, so the read
    // returns at least that much; only the last payload may be partial.
    const size_t k = spin_recvmsg(fd, iov, cnt);
    if (k < header_end) fail("short read after a peek", k);
    seg = cur;
    placed = std::min(k - header_end, seg.plen);
    return true;
  }

  void receive(std::vector<uint8_t>& target) {
    for (bool last = false; !last;) {
      fill_staging(fpdu_header_size);
      const uint8_t* f = staging.data() + pos;
      Segment seg = check_header(f, target.size());
      wire::Crc32c crc;
      if (this->crc) crc.update(f, fpdu_header_size);
      pos += fpdu_header_size;
      // Payload octets that came with the header are copied; the rest is read
      // straight into the target with the staging tail behind it.
      size_t placed = std::min(seg.plen, end - pos);
      std::memcpy(target.data() + seg.mo, staging.data() + pos, placed);
      pos += placed;
      while (peek && placed < seg.plen && read_ahead(target, seg, placed)) {
      }
      uint8_t* dst = target.data() + seg.mo;
      while (placed < seg.plen) {
        iovec iov[2] = {{dst + placed, seg.plen - placed}, {staging.data(), tail}};
        const size_t k = spin_recvmsg(fd, iov, 2);
        const size_t into_target = std::min(k, seg.plen - placed);
        placed += into_target;
        pos = 0;
        end = k - into_target;
      }
      fill_staging(seg.pad + wire::mpa_crc_size);
      if (this->crc) {
        crc.update(dst, seg.plen);
        crc.update(staging.data() + pos, seg.pad);
        if (crc.value() != wire::load_crc_field(staging.data() + pos + seg.pad)) fail("CRC error at MSN", msn);
      }
      pos += seg.pad + wire::mpa_crc_size;
      last = seg.last;
      if (last && seg.mo + seg.plen != target.size()) fail("message of the wrong length, MSN", msn);
    }
    ++msn;
  }
};

}  // namespace

int main(int argc, char** argv) {
  const Options o = parse(argc, argv);
  const int fd = connect_or_accept(o);
  std::vector<uint8_t> buf(o.size);
  for (size_t i = 0; i < buf.size(); ++i) buf[i] = static_cast<uint8_t>(i * 131 + 7);

  if (!o.host.empty()) {
    if (o.mpa)
      send_mpa(fd, o, buf);
    else
      send_unframed(fd, o, buf);
    int64_t ns = 0;
    iovec iov{&ns, sizeof ns};
    for (size_t got = 0; got < sizeof ns;) {
      ssize_t k = readv(fd, &iov, 1);
      if (k <= 0) fail("no result from the receiver, messages sent:", o.iters);
      got += static_cast<size_t>(k);
      iov.iov_base = reinterpret_cast<char*>(&ns) + got;
      iov.iov_len = sizeof ns - got;
    }
    const unsigned timed = o.iters - std::max(1u, o.iters / 10);
    const char* rx = o.rx == Options::Rx::opaque ? "+opaque" : o.rx == Options::Rx::peek ? "+peek" : "";
    std::printf("stream_bw %s%s%s%s%s%s %zu %u %.1f\n", o.mpa ? "mpa" : "none", o.crc ? "+crc" : "", rx,
                o.read_max != SIZE_MAX ? "+read-max" : "", o.tail != default_tail ? "+tail" : "",
                o.tx_bounce != 0 ? "+tx-bounce" : "", o.size, o.iters, ns > 0 ? static_cast<double>(timed) * static_cast<double>(o.size) * 1e3 / static_cast<double>(ns) : 0.0);
  } else {
    g_read_max = o.read_max;
    std::vector<uint8_t> target(o.size);
    MpaReceiver mpa{fd, o.crc, o.tail, o.rx == Options::Rx::peek};
    int zero = 0;
    if (o.rx == Options::Rx::peek && setsockopt(fd, SOL_SOCKET, SO_PEEK_OFF, &zero, sizeof zero) != 0)
      die("SO_PEEK_OFF on TCP (Linux 6.9 or later)");
    std::vector<uint8_t> opaque(o.rx == Options::Rx::opaque ? mpa_message_wire_length(o.size, payload_per_fpdu(fd)) : 0);
    const unsigned warm = std::max(1u, o.iters / 10);
    std::chrono::steady_clock::time_point start;
    for (unsigned m = 1; m <= o.iters; ++m) {
      if (o.rx == Options::Rx::opaque)
        receive_unframed(fd, opaque);
      else if (o.mpa)
        mpa.receive(target);
      else
        receive_unframed(fd, target);
      if (m == warm) start = std::chrono::steady_clock::now();
    }
    const int64_t ns = std::chrono::duration_cast<std::chrono::nanoseconds>(
                           std::chrono::steady_clock::now() - start).count();
    if (o.rx != Options::Rx::opaque && target != buf) fail("last message differs from what was sent", 0);
    if (send(fd, &ns, sizeof ns, MSG_NOSIGNAL) != static_cast<ssize_t>(sizeof ns)) die("send");
  }
  close(fd);
  return 0;
}
