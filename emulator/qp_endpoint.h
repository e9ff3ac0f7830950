// Connecting a QP without rdma_cm: ibv_modify_qp(RTR) with an address
// vector (dgid) and a destination QPN, as InfiniBand applications do
// (perftest without -R, ibv_rc_pingpong).  Design and wire format:
// docs/oob-connect.md.
//
// - QP numbers locate the peer QP: QPN = (endpoint TCP port << 8) | slot.
//   The endpoint is a listening socket of this process (any address,
//   ephemeral port) opened with the first QP; each port serves 256 slots and
//   another one opens when they are taken.
// - At RTR the side whose (GID, QPN) is lower is the Initiator: it dials the
//   peer's endpoint (address from the dgid, port from the QPN) through the
//   ConnectionManager, naming both QPs in the MPA Request private data
//   (emulator/cm/oob_private_data.h).  The other side waits for that Request
//   and accepts it only from the (address, QPN) its own RTR named.  Two peers
//   that both "connect" thus make exactly one connection.
// - Work requests posted before the connection exists wait in the SQ; the
//   hand-off is QueuePair::attach_connection.
// - Failure (refused beyond the deadline, unreachable, MPA timeout, Reject,
//   no Request in time): the QP goes to ERROR (flushed completions) and the
//   device reports IBV_EVENT_QP_FATAL.
#pragma once

#include <array>
#include <bitset>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <thread>
#include <unordered_map>
#include <vector>

#include "emulator/cm/connection_manager.h"

namespace iwemu {

class Emulator;
class QueuePair;

using Gid = std::array<uint8_t, 16>;  // as ibv_gid.raw: IPv4-mapped or IPv6 address

class QpEndpoint {
public:
    explicit QpEndpoint(Emulator& emu);
    ~QpEndpoint();  // joins the timer and CM threads; pending links are dropped
    QpEndpoint(const QpEndpoint&) = delete;
    QpEndpoint& operator=(const QpEndpoint&) = delete;

    static constexpr uint32_t slots_per_port = 256;

    // A QPN for a new QP: (port << 8) | slot, never one for which taken()
    // is true.  0 when no endpoint socket could be opened (the caller then
    // numbers the QP itself; such a QP can only be connected by rdma_cm).
    // Must not be called with this object's lock held (obviously) and never
    // calls back into the Emulator.
    uint32_t allocate_qpn(const std::function<bool(uint32_t)>& taken);

    // The QP reached RTR with AV + dest QPN: start connecting (Initiator) or
    // wait for the peer's Request (Responder).  Returns 0 or a positive errno:
    //   EINVAL   unusable GID (unspecified, link-local), the QP itself, unknown QP
    //   ENOTCONN the QP's number is not one of this endpoint's
    //   EALREADY the QP was already given another peer
    // The outcome arrives asynchronously (QP to RTS, or ERROR + QP_FATAL).
    int connect(uint32_t qpn, const Gid& local_gid, const Gid& remote_gid, uint32_t remote_qpn);

    // The checks connect() makes on its arguments alone (0 or EINVAL), for a
    // caller that wants to refuse before changing the QP's state.
    static int check_peer(uint32_t qpn, const Gid& local_gid, const Gid& remote_gid, uint32_t remote_qpn);

    // The QP's modify_qp connect has failed (it is in ERROR, QP_FATAL sent).
    bool link_failed(uint32_t qpn);

    // The QP was reset: cancel its link (a later RTR may name another peer).
    void reset(uint32_t qpn);
    // The QP is being destroyed: cancel its link, free its slot.
    void forget(uint32_t qpn);

    // Who dials: the lower (GID, QPN), compared as 16 octets then the number.
    static bool initiates(const Gid& local_gid, uint32_t local_qpn, const Gid& remote_gid, uint32_t remote_qpn);

    // Tests: time limits (defaults from Config::oob_timeout_ms).
    void set_timeout(std::chrono::milliseconds total, std::chrono::milliseconds retry_interval);

private:
    using Clock = std::chrono::steady_clock;

    // One QP's connection attempt.  Transitions:
    //   Initiator: connecting -> established | backoff (refused, time left) | failed
    //              backoff -> connecting (retry_at) | failed (deadline)
    //   Responder: awaiting_request -> accepting (a matching Request) | failed (deadline)
    //              accepting -> established | failed (peer gave up / attach refused)
    enum class LinkState : uint8_t { connecting, backoff, awaiting_request, accepting, established, failed };

    struct Link {
        std::weak_ptr<QueuePair> qp;
        Gid local_gid{};
        Gid remote_gid{};
        uint32_t remote_qpn = 0;
        bool initiator = false;
        LinkState state = LinkState::connecting;
        Clock::time_point deadline{};   // give up after this
        Clock::time_point retry_at{};   // backoff: next connect
        cm::ConnectionId conn = 0;      // connect() or accepted Request in progress
        uint64_t attempt = 0;           // tags the active handler of the current connect()
    };

    // A Request that arrived before its target QP reached RTR.
    struct Parked {
        uint32_t target_qpn = 0;
        uint32_t source_qpn = 0;
        Gid source_gid{};
        Clock::time_point expires{};
    };

    struct Port {
        uint16_t number = 0;
        cm::ListenerId listener = 0;
        std::bitset<slots_per_port> used;
    };

    // Side effects found under lock_, carried out after releasing it.
    struct Actions {
        std::vector<std::weak_ptr<QueuePair>> fail;
        std::vector<std::pair<cm::ConnectionId, uint8_t>> reject;  // id, OobRejectReason
        std::vector<cm::ConnectionId> destroy;
    };

    bool open_port_locked();
    bool own_port_locked(uint32_t qpn) const;
    void start_connect_locked(uint32_t qpn, Link& link, Actions& act);
    bool accept_locked(uint32_t qpn, Link& link, cm::ConnectionId id, Actions& act);
    void fail_locked(Link& link, const char* why, uint32_t qpn, Actions& act);
    void cancel_locked(uint32_t qpn, Actions& act);
    void run(Actions& act);
    void on_listener_event(const cm::CmEvent& ev);
    void on_active_event(uint32_t qpn, uint64_t attempt, const cm::CmEvent& ev);
    void timer_main();

    Emulator& emu_;
    std::unique_ptr<cm::ConnectionManager> cm_;
    std::chrono::milliseconds timeout_;
    std::chrono::milliseconds retry_interval_{100};
    std::chrono::milliseconds mpa_timeout_;

    std::mutex lock_;
    std::vector<Port> ports_;
    bool ports_failed_ = false;   // listening failed once: stop trying
    std::unordered_map<uint32_t, Link> links_;
    std::unordered_map<cm::ConnectionId, Parked> parked_;
    uint64_t next_attempt_ = 1;

    // Held while run() calls into the CM: the destructor waits for it once
    // stop_ is set, so no handler touches cm_ while it is torn down.
    std::mutex run_lock_;
    std::condition_variable timer_cv_;
    std::thread timer_;
    bool stop_ = false;
};

}  // namespace iwemu
