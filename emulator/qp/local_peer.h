// Pairs the two ends of a connection that both live in this process
// (loopback), so an RDMA Write's completion at the sender can wait for its
// placement at the target (QueuePair::local_writes_place, local_peer.cpp).
// Consulted once per connection, at attach; the data path never looks here.
#pragma once

#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>

namespace iwemu {

class QueuePair;

class LocalPeers {
public:
    // "local address/port + peer address/port" of a connected socket, or
    // empty (not on this host, or the socket is gone).
    static std::string tuple_of(int fd);
    static std::string reversed(const std::string& tuple);

    // `qp` (connection `conn`, socket `tuple`) attached: pair it with the
    // other end if that attached here already, else wait for it.
    void attach(const std::shared_ptr<QueuePair>& qp, const std::string& tuple, uint64_t conn);
    // destroy_qp: drop what still waits for a peer.
    void forget(const QueuePair* qp);

private:
    struct Waiting {
        std::weak_ptr<QueuePair> qp;
        uint64_t conn = 0;
    };
    std::mutex lock_;
    std::unordered_map<std::string, Waiting> waiting_;  // by tuple
};

}  // namespace iwemu
