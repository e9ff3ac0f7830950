// The graceful end of a destroyed QP's stream (Engine::linger_close).
//
// A QP destroyed with a clean stream -- after rdma_disconnect, or straight
// from RTS as perftest does with its control QP -- has queued its FIN.  Two
// things must still happen that a plain close() cannot do:
//   - input the peer sends before its FIN (or had sent and we never read)
//     must be consumed: close() with unread octets makes Linux answer with
//     an RST, which throws away what the socket still holds for the peer --
//     the last Send that already completed successfully at our side;
//   - the peer's FIN must be heard: it is what rdma_cm reports as
//     DISCONNECTED (cmtime disconnects, destroys its QP at once, then waits
//     for that event), as the kernel's iw_cm does when the QP is gone.
// So the socket stays open in the engine's epoll set, read and discarded,
// until the peer's FIN (done(0)), an error (done(error)) or
// close_linger_max (done(ETIMEDOUT); a peer that never closes its half),
// or a peer that keeps streaming well after our FIN (after_fin_octets; an
// RST, done(ECONNRESET)), and is closed then.  At stop (emulator teardown)
// what is left is drained and closed without a callback.
// Each drain reads a bounded amount (final_drain_octets): a peer that keeps
// streaming at the closed QP holds neither the destroy that lingers, nor
// the engine's loop, nor a teardown.  A teardown (or the end of the linger)
// that finds the peer still sending closes with an RST, the kernel's answer
// to unread input, so the peer's later work requests fail rather than
// vanish as if received.
#include <sys/epoll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cerrno>

#include "emulator/capture/stream_capture.h"
#include "emulator/cm/tcp_socket.h"
#include "emulator/engine.h"
#include "emulator/base/log.h"

namespace iwemu {

namespace {

// Octets a drain reads and drops at most.  The last one before a close:
// several socket buffers, so a peer's in-flight tail is taken whole, while
// a peer streaming faster than we read cannot keep the drain going.  One
// pass of the engine's loop: less, the other QPs wait meanwhile.
constexpr size_t final_drain_octets = size_t{16} << 20;
constexpr size_t engine_pass_octets = size_t{1} << 20;
// A peer that sends this much more after our FIN went is not closing: it
// streams at a QP that is gone, and an RST tells it so.
constexpr size_t after_fin_octets = size_t{64} << 20;

enum class Drained : uint8_t {
    peer_closed,    // its FIN
    open,           // nothing more for now
    still_sending,  // the pass ended with input left
    failed,         // the socket's error (in *error)
};

// Reads and drops what the socket holds, up to limit octets (*taken: how
// many it read).
Drained drain_input(int fd, size_t limit, int* error = nullptr, size_t* taken = nullptr)
{
    std::array<uint8_t, 65536> sink;
    size_t got = 0;
    const auto ended = [&](Drained d) {
        if (taken) *taken = got;
        return d;
    };
    while (got < limit) {
        const ssize_t n = capture::on() ? capture::recv(fd, sink.data(), sink.size(), MSG_DONTWAIT, 0)
                                         : ::recv(fd, sink.data(), sink.size(), MSG_DONTWAIT);
        if (n > 0) {
            got += static_cast<size_t>(n);
            continue;
        }
        if (n == 0) return ended(Drained::peer_closed);
        if (errno == EINTR) continue;
        if (errno == EWOULDBLOCK) return ended(Drained::open);
        if (error) *error = errno;
        return ended(Drained::failed);
    }
    return ended(Drained::still_sending);
}

// The done() error of a drain that ended the linger (peer_closed or failed).
int drain_error(Drained d, int error) { return d == Drained::peer_closed ? 0 : error; }

// Closes a drained socket: with an RST when the peer was still sending.
void close_drained(int fd, bool abortive)
{
    if (capture::on()) capture::closing(fd, abortive);
    if (abortive)
        cm::close_abortive(fd);
    else
        ::close(fd);
}

// The drain before a close: true when the peer was still sending after it.
bool still_sending_after_last_drain(int fd)
{
    return drain_input(fd, final_drain_octets) == Drained::still_sending;
}

}  // namespace

void Engine::linger_close(int fd, std::function<void(int error)> done, std::optional<Clock::time_point> fin_at)
{
    if (stop_.load(std::memory_order_acquire)) {
        close_drained(fd, still_sending_after_last_drain(fd));
        return;
    }
    int err = 0;
    const Drained d = drain_input(fd, engine_pass_octets, &err);  // a destroy returns soon; the engine goes on
    if (d == Drained::peer_closed || d == Drained::failed) {  // the peer's FIN (or an error) is already here
        close_drained(fd, false);
        if (done) done(drain_error(d, err));
        return;
    }
    {
        std::lock_guard<std::mutex> g(linger_lock_);
        lingering_.push_back({fd, Clock::now() + close_linger_max, std::move(done), fin_at});
        linger_count_.store(lingering_.size(), std::memory_order_release);
    }
    epoll_event ev{};
    ev.events = EPOLLIN | EPOLLRDHUP;
    ev.data.u64 = linger_tag | static_cast<uint32_t>(fd);
    if (epoll_ctl(epfd_, EPOLL_CTL_ADD, fd, &ev) != 0) {
        IWEMU_LOG(warn, "engine: cannot watch closing socket %d: %d", fd, errno);
        linger_ready(fd);  // drains and closes it, or leaves it to the deadline
    }
    const uint64_t one = 1;
    ssize_t ignored = write(wake_fd_, &one, sizeof one);  // the deadline bounds the next sleep
    (void)ignored;
}

size_t Engine::lingering() const
{
    std::lock_guard<std::mutex> g(linger_lock_);
    return lingering_.size();
}

void Engine::linger_ready(int fd)
{
    int err = 0;
    size_t taken = 0;
    const Drained d = drain_input(fd, engine_pass_octets, &err, &taken);
    const bool ends = d == Drained::peer_closed || d == Drained::failed;
    if (!ends && taken == 0) return;
    LingeringSocket s{};
    {
        std::lock_guard<std::mutex> g(linger_lock_);
        auto it = std::find_if(lingering_.begin(), lingering_.end(), [fd](const auto& l) { return l.fd == fd; });
        if (it == lingering_.end()) return;
        if (!ends) {
            if (it->fin_at) return;  // our FIN has not gone yet: input is still the peer's due
            it->after_fin += taken;
            if (it->after_fin < after_fin_octets) return;  // level-triggered: the rest next pass
        }
        s = std::move(*it);
        *it = std::move(lingering_.back());
        lingering_.pop_back();
        linger_count_.store(lingering_.size(), std::memory_order_release);
    }
    if (!ends) {
        IWEMU_LOG(info, "engine: socket %d: the peer sent %zu MiB after our FIN: reset", fd, s.after_fin >> 20);
        linger_finish(std::move(s), true, ECONNRESET);
        return;
    }
    linger_finish(std::move(s), false, drain_error(d, err));
}

void Engine::linger_finish(LingeringSocket s, bool peer_still_sending, int error)
{
    epoll_ctl(epfd_, EPOLL_CTL_DEL, s.fd, nullptr);
    IWEMU_LOG(debug, "engine: closing socket %d: %s", s.fd,
              peer_still_sending ? "the peer is still sending (RST)"
              : error == 0       ? "the peer closed"
              : error == ETIMEDOUT ? "the peer never closed"
                                   : "error");
    close_drained(s.fd, peer_still_sending);
    if (s.done) s.done(error);
}

void Engine::linger_expire()
{
    if (linger_count_.load(std::memory_order_acquire) == 0) return;
    std::vector<LingeringSocket> due;
    {
        std::lock_guard<std::mutex> g(linger_lock_);
        const auto now = Clock::now();
        for (auto& l : lingering_) {
            if (l.fin_at && *l.fin_at <= now) {
                if (capture::on()) capture::shutdown_wr(l.fd);
                ::shutdown(l.fd, SHUT_WR);
                l.fin_at.reset();
            }
        }
        for (size_t i = 0; i < lingering_.size();) {
            if (lingering_[i].deadline <= now) {
                due.push_back(std::move(lingering_[i]));
                lingering_[i] = std::move(lingering_.back());
                lingering_.pop_back();
            } else {
                ++i;
            }
        }
        linger_count_.store(lingering_.size(), std::memory_order_release);
    }
    for (auto& s : due) {
        const bool still_sending = still_sending_after_last_drain(s.fd);
        linger_finish(std::move(s), still_sending, ETIMEDOUT);
    }
}

int Engine::linger_timeout_ms(int timeout_ms)
{
    if (linger_count_.load(std::memory_order_acquire) == 0) return timeout_ms;
    std::lock_guard<std::mutex> g(linger_lock_);
    if (lingering_.empty()) return timeout_ms;
    Clock::time_point first = lingering_.front().deadline;
    for (const auto& l : lingering_) first = std::min(first, l.fin_at ? std::min(*l.fin_at, l.deadline) : l.deadline);
    const auto ms = std::chrono::ceil<std::chrono::milliseconds>(first - Clock::now()).count();
    const int t = ms <= 0 ? 0 : ms > 60000 ? 60000 : static_cast<int>(ms);
    return timeout_ms >= 0 && timeout_ms < t ? timeout_ms : t;
}

std::optional<Engine::Clock::time_point> Engine::linger_fins_due() const
{
    std::lock_guard<std::mutex> g(linger_lock_);
    std::optional<Clock::time_point> due;
    for (const auto& l : lingering_)
        if (l.fin_at && (!due || *l.fin_at > *due)) due = l.fin_at;
    return due;
}

void Engine::linger_send_fins()
{
    std::lock_guard<std::mutex> g(linger_lock_);
    for (auto& l : lingering_) {
        if (!l.fin_at) continue;
        if (capture::on()) capture::shutdown_wr(l.fd);
        ::shutdown(l.fd, SHUT_WR);
        l.fin_at.reset();
    }
}

void Engine::linger_close_all()
{
    std::lock_guard<std::mutex> g(linger_lock_);
    for (auto& s : lingering_) close_drained(s.fd, still_sending_after_last_drain(s.fd));
    lingering_.clear();
    linger_count_.store(0, std::memory_order_release);
}

}  // namespace iwemu
