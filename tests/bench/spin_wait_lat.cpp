// spin_wait_lat: the floor of ib_write_lat's pattern over plain TCP, no iwemu.
//
// ib_write_lat's waiting thread spins on the last octet of its buffer and
// never calls into the library, so a user-space RNIC can only place the
// peer's Write from a second thread, which must wake and take the core from
// the spinner when the octets arrive. This program measures exactly that
// with nothing else on the path: a receiver thread blocked in epoll_wait()
// reads each message from the TCP socket and publishes it to memory, and the
// main thread spins on that memory, then sends the reply itself.
// `--one-thread` is the same ping-pong with a blocking recv() in one thread
// (what qperf tcp_lat measures), so one binary shows what the pattern costs.
// `--busy-poll` is the one-thread ping-pong spinning on a non-blocking recv()
// instead: the discipline of ib_send_lat, ucx_perftest and fi_pingpong, and
// the floor of any transport that polls kernel TCP sockets.
//
//   spin_wait_lat [-p PORT] [-s SIZE] [-n ITERS] [--one-thread|--busy-poll]          server
//   spin_wait_lat [-p PORT] [-s SIZE] [-n ITERS] [--one-thread|--busy-poll] HOST     client
//
// The client prints "spin_wait_lat SIZE ITERS typical_us" (half the median
// round trip, perftest's t_typical).

#include <netinet/tcp.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "tests/bench/tcp_pair.h"

namespace {

struct Options : tcp_pair::CommonArgs {  // host empty: server
  Options() {
    port = "18515";
    size = 8;
    iters = 20000;
  }
  // How the waiting side gets the reply: a receiver thread publishes it to
  // memory (ib_write_lat's pattern), or the one thread recv()s it itself.
  enum class Wait { spin_on_memory, blocking_recv, busy_recv } wait = Wait::spin_on_memory;
};

[[noreturn]] void die(const char* what) { tcp_pair::die("spin_wait_lat", what); }

[[noreturn]] void usage() {
  std::fprintf(stderr,
               "usage: spin_wait_lat [-p PORT] [-s SIZE] [-n ITERS] [--cc NAME] [--one-thread|--busy-poll] [HOST]\n");
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
    } else if (a == "--one-thread") {
      o.wait = Options::Wait::blocking_recv;
    } else if (a == "--busy-poll") {
      o.wait = Options::Wait::busy_recv;
    } else {
      usage();
    }
  }
  if (o.size == 0 || o.size > (64u << 20) || o.iters == 0) usage();
  return o;
}

int connect_or_accept(const Options& o) { return tcp_pair::connect_or_accept("spin_wait_lat", o.host, o.port, o.cc); }

void send_all(int fd, const char* p, size_t n) {
  while (n > 0) {
    ssize_t k = send(fd, p, n, MSG_NOSIGNAL);
    if (k < 0 && errno == EINTR) continue;
    if (k <= 0) die("send");
    p += k;
    n -= static_cast<size_t>(k);
  }
}

// Reads one whole message, blocking in recv() or (`spin`) retrying a
// non-blocking one; false at the peer's orderly close.
bool recv_message(int fd, char* p, size_t n, bool spin) {
  while (n > 0) {
    ssize_t k = recv(fd, p, n, spin ? MSG_DONTWAIT : 0);
    if (k == 0) return false;
    if (k < 0) {
      if (errno == EINTR || errno == EAGAIN) continue;
      die("recv");
    }
    p += k;
    n -= static_cast<size_t>(k);
  }
  return true;
}

// The receiver thread: wakes from epoll_wait like an RNIC emulator's engine,
// reads a whole message and publishes it with a store the spinner watches.
void receive_loop(int fd, size_t size, std::atomic<unsigned>* arrived) {
  int ep = epoll_create1(EPOLL_CLOEXEC);
  if (ep < 0) die("epoll_create1");
  epoll_event ev{};
  ev.events = EPOLLIN;
  if (epoll_ctl(ep, EPOLL_CTL_ADD, fd, &ev)) die("epoll_ctl");
  std::vector<char> buf(size);
  size_t have = 0;
  for (;;) {
    epoll_event got{};
    int n = epoll_wait(ep, &got, 1, -1);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) die("epoll_wait");
    for (;;) {
      ssize_t k = recv(fd, buf.data() + have, size - have, MSG_DONTWAIT);
      if (k == 0) {
        close(ep);
        return;
      }
      if (k < 0) {
        if (errno == EAGAIN || errno == EINTR) break;
        die("recv");
      }
      have += static_cast<size_t>(k);
      if (have == size) {
        have = 0;
        arrived->fetch_add(1, std::memory_order_release);
      }
    }
  }
}

}  // namespace

int main(int argc, char** argv) {
  Options o = parse(argc, argv);
  bool client = !o.host.empty();
  int fd = connect_or_accept(o);
  std::vector<char> msg(o.size, 'w');
  std::vector<double> rtt_us;
  rtt_us.reserve(o.iters);

  std::atomic<unsigned> arrived{0};
  std::thread receiver;
  if (o.wait == Options::Wait::spin_on_memory) receiver = std::thread(receive_loop, fd, o.size, &arrived);

  std::vector<char> in(o.size);
  for (unsigned i = 1; i <= o.iters; ++i) {
    auto start = std::chrono::steady_clock::now();
    if (client) send_all(fd, msg.data(), msg.size());
    if (o.wait != Options::Wait::spin_on_memory) {
      if (!recv_message(fd, in.data(), in.size(), o.wait == Options::Wait::busy_recv)) {
        std::fprintf(stderr, "spin_wait_lat: peer closed after %u messages\n", i - 1);
        return 1;
      }
    } else {
      while (arrived.load(std::memory_order_acquire) < i) {
      }
    }
    if (!client) send_all(fd, msg.data(), msg.size());
    std::chrono::duration<double, std::micro> took = std::chrono::steady_clock::now() - start;
    rtt_us.push_back(took.count());
  }
  shutdown(fd, SHUT_WR);
  if (receiver.joinable()) receiver.join();
  close(fd);
  if (client) {
    std::nth_element(rtt_us.begin(), rtt_us.begin() + rtt_us.size() / 2, rtt_us.end());
    std::printf("spin_wait_lat %zu %u %.2f\n", o.size, o.iters, rtt_us[rtt_us.size() / 2] / 2);
  }
  return 0;
}
