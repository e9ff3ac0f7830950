// The QP's link to the other end of its connection when that end is a QP
// in this process (LocalPeers pairs them at attach): a poll that returns a
// Write completion first has the peer place up to that Write
// (QueuePair::local_writes_place).
//
// Guarded by its own lock (peer, peer_conn); the atomics are read without
// it, write_target written under QueuePair::sq_lock_.  Driven by
// local_peer.cpp, tx_engine.cpp (write_target, as the batch leaves) and
// qp.cpp (reset at attach); the stream counts it compares are
// SendPath::stream_sent and ReceivePath::stream_read, the attachment
// QpConnection::id.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>

namespace iwemu {

class QueuePair;

struct LocalPeerLink {
    std::atomic<bool> linked{false};  // the peer QP is in this process
    std::mutex lock;                  // peer, peer_conn
    std::weak_ptr<QueuePair> peer;
    uint64_t peer_conn = 0;
    // Sender: where our last Write to the local peer ends in the stream
    // (sq_lock_ writes), and how far the peer is known to have placed.
    std::atomic<uint64_t> write_target{0};
    std::atomic<uint64_t> write_placed{0};
};

}  // namespace iwemu
