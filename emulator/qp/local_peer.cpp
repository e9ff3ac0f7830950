// An RDMA Write to a QP of this same process: its completion implies placement.
//
// iWARP completes a Write once TCP took all of it (RFC 5040 §5.5); the
// target places it when its own receive path runs (engine thread, a poller).
// An application holding both ends -- rdma-core's tests, a loopback
// benchmark checking data -- polls the sender's CQ and reads the target at
// once.  Kernel siw passes that: loopback TCP runs the receiver's softirq
// inside the sender's sendmsg().  Here the poll that hands out a Write
// completion first runs the peer's receive path itself (its rx_lock_, as
// any polling thread does) until the stream octets up to the end of that
// Write are consumed.  Never waits for what may not come: a peer parked on
// a Send without a receive, in error, closed or destroyed ends the wait at
// once, anything else after local_place_wait_ns; the completion is then
// returned as before.  Lock order: no lock of the sender is held while the
// peer's are taken, so two QPs placing for each other cannot deadlock.
//
// Cost elsewhere: a QP whose peer is not here is never paired; its TX path
// adds the sent octets to a counter, its RX path the read ones; a CQ none
// of whose QPs was ever paired tests one flag per poll that returns.
#include "emulator/qp/local_peer.h"

#include <netinet/in.h>
#include <sched.h>
#include <sys/socket.h>

#include <cstring>

#include "emulator/cq.h"
#include "emulator/base/log.h"
#include "emulator/qp/qp.h"

namespace iwemu {

namespace {

bool append_address(std::string* out, const sockaddr_storage& a)
{
    if (a.ss_family == AF_INET) {
        const auto& s = reinterpret_cast<const sockaddr_in&>(a);
        out->append(reinterpret_cast<const char*>(&s.sin_addr), sizeof s.sin_addr);
        out->append(reinterpret_cast<const char*>(&s.sin_port), sizeof s.sin_port);
        return true;
    }
    if (a.ss_family == AF_INET6) {
        const auto& s = reinterpret_cast<const sockaddr_in6&>(a);
        if (IN6_IS_ADDR_V4MAPPED(&s.sin6_addr)) {
            // A dual-stack listener's end of an IPv4 connection: as the other end sees it.
            out->append(reinterpret_cast<const char*>(&s.sin6_addr) + 12, 4);
            out->append(reinterpret_cast<const char*>(&s.sin6_port), sizeof s.sin6_port);
            return true;
        }
        out->append(reinterpret_cast<const char*>(&s.sin6_addr), sizeof s.sin6_addr);
        out->append(reinterpret_cast<const char*>(&s.sin6_port), sizeof s.sin6_port);
        return true;
    }
    return false;
}

}  // namespace

std::string LocalPeers::tuple_of(int fd)
{
    sockaddr_storage local{}, peer{};
    socklen_t llen = sizeof local, plen = sizeof peer;
    if (getsockname(fd, reinterpret_cast<sockaddr*>(&local), &llen) != 0 ||
        getpeername(fd, reinterpret_cast<sockaddr*>(&peer), &plen) != 0)
        return {};
    std::string t;
    if (!append_address(&t, local) || !append_address(&t, peer)) return {};
    return t;
}

std::string LocalPeers::reversed(const std::string& tuple)
{
    const size_t half = tuple.size() / 2;
    return tuple.substr(half) + tuple.substr(0, half);
}

void LocalPeers::attach(const std::shared_ptr<QueuePair>& qp, const std::string& tuple, uint64_t conn)
{
    std::shared_ptr<QueuePair> other;
    uint64_t other_conn = 0;
    {
        std::lock_guard<std::mutex> g(lock_);
        auto it = waiting_.find(reversed(tuple));
        if (it != waiting_.end()) {
            other = it->second.qp.lock();
            other_conn = it->second.conn;
            waiting_.erase(it);
            if (other && other->connection_id() != other_conn) other.reset();  // re-attached elsewhere since
        }
        if (!other) {
            waiting_[tuple] = Waiting{qp, conn};
            return;
        }
    }
    IWEMU_LOG(debug, "qp %u and qp %u: both ends of one connection in this process", qp->qp_num(), other->qp_num());
    qp->local_peer_link(other, other_conn, false);
    other->local_peer_link(qp, conn, true);
}

void LocalPeers::forget(const QueuePair* qp)
{
    std::lock_guard<std::mutex> g(lock_);
    for (auto it = waiting_.begin(); it != waiting_.end();) {
        const std::shared_ptr<QueuePair> w = it->second.qp.lock();
        if (!w || w.get() == qp)
            it = waiting_.erase(it);
        else
            ++it;
    }
}

// The QP attaching now (rx_lock_ and sq_lock_ held by this thread, nothing
// sent yet), or the other end, which attached before and may have sent
// already (earlier is false).
void QueuePair::local_peer_link(const std::shared_ptr<QueuePair>& peer, uint64_t peer_conn, bool earlier)
{
    {
        std::lock_guard<std::mutex> g(local_.lock);
        local_.peer = peer;
        local_.peer_conn = peer_conn;
    }
    // The CQ looks before the TX records a target: a poll that takes the
    // completion (CQ lock after the push) then sees the flag.
    init_.send_cq->note_local_peer();
    local_.linked.store(true, std::memory_order_release);
    if (!earlier) return;
    // Writes it sent before we were here (posted before its connection
    // existed): their completions wait for all it sent so far.  Not
    // waited for: the attaching thread holds its own QP's locks.
    std::unique_lock<std::mutex> g(sq_lock_, std::try_to_lock);
    if (g.owns_lock() && tx_.stream_sent > local_.write_target.load(std::memory_order_relaxed))
        local_.write_target.store(tx_.stream_sent, std::memory_order_relaxed);
}

void QueuePair::local_writes_place()
{
    const uint64_t target = local_.write_target.load(std::memory_order_relaxed);
    if (target <= local_.write_placed.load(std::memory_order_relaxed)) return;
    std::shared_ptr<QueuePair> peer;
    uint64_t conn;
    {
        std::lock_guard<std::mutex> g(local_.lock);
        peer = local_.peer.lock();
        conn = local_.peer_conn;
    }
    if (!peer) return;
    const int64_t deadline = CompletionQueue::now_ns() + local_place_wait_ns;
    for (;;) {
        const LocalPlace r = peer->rx_place_for_local_peer(conn, target);
        if (r == LocalPlace::blocked) return;
        if (r == LocalPlace::placed) {
            uint64_t seen = local_.write_placed.load(std::memory_order_relaxed);
            while (seen < target &&
                   !local_.write_placed.compare_exchange_weak(seen, target, std::memory_order_relaxed)) {
            }
            return;
        }
        // Another thread is receiving for the peer, or octets are still on
        // their way (the peer's reads open the window behind them).
        if (CompletionQueue::now_ns() >= deadline) {
            IWEMU_LOG(debug, "qp %u: the local peer did not place our Write in time", qp_num_);
            return;
        }
        sched_yield();
    }
}

QueuePair::LocalPlace QueuePair::rx_place_for_local_peer(uint64_t conn, uint64_t stream_octets)
{
    LocalPlace r;
    bool kick;
    {
        std::unique_lock<std::mutex> g(rx_lock_, std::try_to_lock);
        if (!g.owns_lock()) return LocalPlace::pending;
        // Octets consumed: read, less what still waits in the staging buffer.
        auto consumed = [this] { return rx_.stream_read - (rx_.end - rx_.pos); };
        auto stuck = [this] {
            return rx_rnr_parked_ || rx_.dead || destroyed_.load(std::memory_order_relaxed) ||
                   fd_.load(std::memory_order_relaxed) < 0 || peer_fin_.load(std::memory_order_relaxed);
        };
        if (conn_.id.load(std::memory_order_relaxed) != conn) return LocalPlace::blocked;
        if (consumed() >= stream_octets) return LocalPlace::placed;
        if (stuck() && !rx_rnr_parked_) return LocalPlace::blocked;  // parked: its retry below may place
        rx_locked();
        kick = std::exchange(rx_.tx_kick, false);
        r = consumed() >= stream_octets ? LocalPlace::placed : stuck() ? LocalPlace::blocked : LocalPlace::pending;
    }
    if (kick) rx_kick_tx();
    drain_deferred();
    return r;
}

}  // namespace iwemu
