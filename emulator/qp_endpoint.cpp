#include "emulator/qp_endpoint.h"

#include <arpa/inet.h>
#include <netinet/in.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <functional>

#include "emulator/cm/oob_private_data.h"
#include "emulator/emulator.h"
#include "emulator/base/log.h"

namespace iwemu {
namespace {

constexpr size_t max_parked = 1024;  // Requests waiting for their QP's RTR, process-wide

cm::CmSettings settings_from(const Emulator& emu)
{
    const Config& cfg = emu.config();
    cm::CmSettings s;
    s.mpa_revision = cfg.mpa_revision;
    s.accept_rev0 = cfg.mpa_rev0_accept;
    s.crc = cfg.crc;
    s.markers = cfg.markers;
    // Peer-to-peer is required here: either side may send first once both
    // reached RTS, so the Responder must not wait for the Initiator's data
    // (RFC 5044 §7.1.2 rule 4).  The seed-002 frame mode is honoured.
    s.peer_to_peer = cfg.seed_rtr_frame ? cm::PeerToPeerMode::seed002 : cm::PeerToPeerMode::rfc6581;
    s.rtr = cm::rtr_types_from_list(cfg.rtr_types);
    if (!s.rtr.any()) s.rtr.zero_length_write = s.rtr.zero_length_read = true;
    s.max_half_open_per_listener = cfg.max_half_open;
    s.mpa_timeout = std::chrono::milliseconds(cfg.mpa_timeout_ms);
    s.connect_retries = cfg.connect_retries;
    s.max_ird = static_cast<uint16_t>(std::min<uint32_t>(emu.device_attributes().max_qp_rd_atom, 0xFFFF));
    s.max_ord = static_cast<uint16_t>(std::min<uint32_t>(emu.device_attributes().max_qp_init_rd_atom, 0xFFFF));
    return s;
}

bool is_v4_mapped(const Gid& g)
{
    static constexpr uint8_t prefix[12] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff};
    return std::memcmp(g.data(), prefix, sizeof prefix) == 0;
}

// dgid/sgid -> socket address.  Unspecified and link-local addresses cannot
// be dialled without more context (scope id), so they are refused.
bool gid_to_sockaddr(const Gid& g, uint16_t port, sockaddr_storage* out)
{
    *out = {};
    if (is_v4_mapped(g)) {
        auto* a = reinterpret_cast<sockaddr_in*>(out);
        a->sin_family = AF_INET;
        a->sin_port = htons(port);
        std::memcpy(&a->sin_addr, g.data() + 12, 4);
        return a->sin_addr.s_addr != 0;
    }
    in6_addr a6;
    std::memcpy(&a6, g.data(), 16);
    if (IN6_IS_ADDR_UNSPECIFIED(&a6) || IN6_IS_ADDR_LINKLOCAL(&a6)) return false;
    auto* a = reinterpret_cast<sockaddr_in6*>(out);
    a->sin6_family = AF_INET6;
    a->sin6_port = htons(port);
    a->sin6_addr = a6;
    return true;
}

// Peer socket address -> canonical 16 octets (IPv4 as IPv4-mapped).
Gid sockaddr_to_gid(const sockaddr_storage& s)
{
    Gid g{};
    if (s.ss_family == AF_INET) {
        g[10] = g[11] = 0xff;
        std::memcpy(g.data() + 12, &reinterpret_cast<const sockaddr_in&>(s).sin_addr, 4);
    } else if (s.ss_family == AF_INET6) {
        std::memcpy(g.data(), &reinterpret_cast<const sockaddr_in6&>(s).sin6_addr, 16);
    }
    return g;
}

uint16_t port_of(const sockaddr_storage& s)
{
    if (s.ss_family == AF_INET) return ntohs(reinterpret_cast<const sockaddr_in&>(s).sin_port);
    if (s.ss_family == AF_INET6) return ntohs(reinterpret_cast<const sockaddr_in6&>(s).sin6_port);
    return 0;
}

// The CM's attach callback for a QP connected out of band: a peer's FIN
// leaves posted receives pending, as on InfiniBand where a QP never sees its
// peer's destroy (ConnectionParams::keep_rq_on_peer_close).  A QP destroyed
// during MPA startup refuses the socket.
std::function<int(cm::ConnectionId, const ConnectionParams&)> attach_ib_style(std::weak_ptr<QueuePair> weak)
{
    return [weak = std::move(weak)](cm::ConnectionId, const ConnectionParams& p) {
        auto qp = weak.lock();
        if (!qp) return -ENOENT;
        ConnectionParams ib_style = p;
        ib_style.keep_rq_on_peer_close = true;
        return qp->attach_connection(ib_style);
    };
}

}  // namespace

QpEndpoint::QpEndpoint(Emulator& emu)
    : emu_(emu),
      timeout_(emu.config().oob_timeout_ms),
      mpa_timeout_(emu.config().mpa_timeout_ms)
{
}

QpEndpoint::~QpEndpoint()
{
    {
        std::lock_guard g(lock_);
        stop_ = true;
    }
    timer_cv_.notify_all();
    if (timer_.joinable()) timer_.join();
    { std::lock_guard r(run_lock_); }  // a handler's run() in progress has finished
    cm_.reset();  // closes the listeners and connections in startup, joins the CM thread
}

void QpEndpoint::set_timeout(std::chrono::milliseconds total, std::chrono::milliseconds retry_interval)
{
    std::lock_guard g(lock_);
    timeout_ = total;
    retry_interval_ = retry_interval;
}

bool QpEndpoint::initiates(const Gid& local_gid, uint32_t local_qpn, const Gid& remote_gid, uint32_t remote_qpn)
{
    const int c = std::memcmp(local_gid.data(), remote_gid.data(), local_gid.size());
    return c < 0 || (c == 0 && local_qpn < remote_qpn);
}

// ---------------------------------------------------------------- numbering

bool QpEndpoint::open_port_locked()
{
    if (ports_failed_) return false;
    if (!cm_) cm_ = std::make_unique<cm::ConnectionManager>(settings_from(emu_));
    auto handler = [this](const cm::CmEvent& ev) { on_listener_event(ev); };
    // Dual-stack any-address first (IPv4 peers arrive IPv4-mapped), IPv4 only
    // on hosts without IPv6.
    sockaddr_in6 a6{};
    a6.sin6_family = AF_INET6;
    a6.sin6_addr = in6addr_any;
    sockaddr_storage bound{};
    cm::ListenerId id = 0;
    int rc = cm_->listen(reinterpret_cast<sockaddr*>(&a6), sizeof a6, 1024, handler, &id, &bound);
    if (rc != 0) {
        sockaddr_in a4{};
        a4.sin_family = AF_INET;
        a4.sin_addr.s_addr = htonl(INADDR_ANY);
        rc = cm_->listen(reinterpret_cast<sockaddr*>(&a4), sizeof a4, 1024, handler, &id, &bound);
    }
    const uint16_t port = rc == 0 ? port_of(bound) : 0;
    if (rc != 0 || port == 0) {
        IWEMU_LOG(warn, "qp endpoint: cannot listen (%d): QPs can only be connected through rdma_cm", rc);
        if (rc == 0) cm_->stop_listening(id);
        ports_failed_ = true;
        return false;
    }
    Port p;
    p.number = port;
    p.listener = id;
    ports_.push_back(p);
    IWEMU_LOG(info, "qp endpoint: listening on port %u (QPNs 0x%06x..0x%06x)", port, port << 8, (port << 8) | 0xFF);
    return true;
}

bool QpEndpoint::own_port_locked(uint32_t qpn) const
{
    return std::any_of(ports_.begin(), ports_.end(), [&](const Port& p) { return p.number == (qpn >> 8); });
}

uint32_t QpEndpoint::allocate_qpn(const std::function<bool(uint32_t)>& taken)
{
    std::lock_guard g(lock_);
    for (int round = 0; round < 2; ++round) {
        for (Port& p : ports_) {
            for (uint32_t s = 0; s < slots_per_port; ++s) {
                const uint32_t qpn = (uint32_t{p.number} << 8) | s;
                if (p.used[s] || qpn < 2 || taken(qpn)) continue;
                p.used[s] = true;
                return qpn;
            }
        }
        if (!open_port_locked()) return 0;
    }
    return 0;
}

bool QpEndpoint::link_failed(uint32_t qpn)
{
    std::lock_guard g(lock_);
    auto it = links_.find(qpn);
    return it != links_.end() && it->second.state == LinkState::failed;
}

void QpEndpoint::cancel_locked(uint32_t qpn, Actions& act)
{
    auto it = links_.find(qpn);
    if (it != links_.end()) {
        if (it->second.conn) act.destroy.push_back(it->second.conn);
        links_.erase(it);
    }
    for (auto pi = parked_.begin(); pi != parked_.end();) {
        if (pi->second.target_qpn == qpn) {
            act.reject.emplace_back(pi->first, static_cast<uint8_t>(cm::OobRejectReason::qp_state));
            pi = parked_.erase(pi);
        } else {
            ++pi;
        }
    }
}

void QpEndpoint::reset(uint32_t qpn)
{
    Actions act;
    {
        std::lock_guard g(lock_);
        cancel_locked(qpn, act);
    }
    run(act);
}

void QpEndpoint::forget(uint32_t qpn)
{
    Actions act;
    {
        std::lock_guard g(lock_);
        for (Port& p : ports_)
            if (p.number == (qpn >> 8)) p.used[qpn & 0xFF] = false;
        cancel_locked(qpn, act);
    }
    run(act);
}

// ---------------------------------------------------------------- linking

int QpEndpoint::check_peer(uint32_t qpn, const Gid& local_gid, const Gid& remote_gid, uint32_t remote_qpn)
{
    sockaddr_storage probe;
    if (remote_qpn > 0xFFFFFF || (remote_qpn >> 8) == 0 || !gid_to_sockaddr(remote_gid, 1, &probe)) return EINVAL;
    if (local_gid == remote_gid && qpn == remote_qpn) return EINVAL;  // a QP cannot be its own peer
    return 0;
}

int QpEndpoint::connect(uint32_t qpn, const Gid& local_gid, const Gid& remote_gid, uint32_t remote_qpn)
{
    std::shared_ptr<QueuePair> qp = emu_.find_qp(qpn);  // before lock_: objects_lock_ comes first
    if (!qp) return EINVAL;
    if (int err = check_peer(qpn, local_gid, remote_gid, remote_qpn)) return err;
    Actions act;
    {
        std::lock_guard g(lock_);
        if (!own_port_locked(qpn)) return ENOTCONN;
        if (auto it = links_.find(qpn); it != links_.end()) {
            const Link& l = it->second;
            // Repeating RTR with the same peer is harmless; another peer is not.
            return (l.remote_gid == remote_gid && l.remote_qpn == remote_qpn) ? 0 : EALREADY;
        }
        Link& link = links_[qpn];
        link.qp = qp;
        link.local_gid = local_gid;
        link.remote_gid = remote_gid;
        link.remote_qpn = remote_qpn;
        link.initiator = initiates(local_gid, qpn, remote_gid, remote_qpn);
        const auto now = Clock::now();
        link.deadline = now + timeout_;
        IWEMU_LOG(info, "qp %u: RTR to qp %u: %s", qpn, remote_qpn, link.initiator ? "initiator" : "responder");
        if (link.initiator) {
            start_connect_locked(qpn, link, act);
        } else {
            // The Initiator may spend the whole timeout retrying plus one MPA startup.
            link.deadline = now + timeout_ + mpa_timeout_;
            link.state = LinkState::awaiting_request;
            for (auto pi = parked_.begin(); pi != parked_.end();) {
                if (pi->second.target_qpn != qpn) {
                    ++pi;
                    continue;
                }
                const bool match = link.state == LinkState::awaiting_request &&
                                   pi->second.source_qpn == remote_qpn && pi->second.source_gid == remote_gid;
                if (!match || !accept_locked(qpn, link, pi->first, act))
                    act.reject.emplace_back(pi->first, static_cast<uint8_t>(cm::OobRejectReason::peer_mismatch));
                pi = parked_.erase(pi);
            }
        }
        if (!timer_.joinable()) timer_ = std::thread([this] { timer_main(); });
    }
    timer_cv_.notify_all();
    run(act);
    return 0;
}

void QpEndpoint::start_connect_locked(uint32_t qpn, Link& link, Actions& act)
{
    cm::ConnectArgs args;
    gid_to_sockaddr(link.remote_gid, static_cast<uint16_t>(link.remote_qpn >> 8), &args.remote);
    // Leave from the address our GID names: the Responder checks the source
    // against the dgid its own RTR was given.
    sockaddr_storage local;
    if (gid_to_sockaddr(link.local_gid, 0, &local)) args.local = local;
    std::array<uint8_t, cm::oob_private_data_size> pd{};
    cm::OobPrivateData req;
    req.kind = cm::OobKind::request;
    req.target_qpn = link.remote_qpn;
    req.source_qpn = qpn;
    cm::encode_oob_private_data(req, pd);
    args.private_data = pd;
    args.ird = cm_->settings().max_ird;
    args.ord = cm_->settings().max_ord;
    args.endpoint.attach = attach_ib_style(link.qp);
    const uint64_t attempt = next_attempt_++;
    link.attempt = attempt;
    args.handler = [this, qpn, attempt](const cm::CmEvent& ev) { on_active_event(qpn, attempt, ev); };
    link.state = LinkState::connecting;
    cm::ConnectionId id = 0;
    // Events of this id wait for lock_, so link.conn is set before they are seen.
    if (int rc = cm_->connect(args, &id); rc != 0) {
        IWEMU_LOG(warn, "qp %u: connect to qp %u failed at once (%d)", qpn, link.remote_qpn, rc);
        fail_locked(link, "connect", qpn, act);
        return;
    }
    link.conn = id;
}

bool QpEndpoint::accept_locked(uint32_t qpn, Link& link, cm::ConnectionId id, Actions& act)
{
    cm::AcceptArgs args;
    args.ird = cm_->settings().max_ird;
    args.ord = cm_->settings().max_ord;
    args.endpoint.attach = attach_ib_style(link.qp);
    if (int rc = cm_->accept(id, args); rc != 0) {
        IWEMU_LOG(warn, "qp %u: accept failed (%d)", qpn, rc);
        fail_locked(link, "accept", qpn, act);
        return false;
    }
    link.state = LinkState::accepting;
    link.conn = id;
    return true;
}

void QpEndpoint::fail_locked(Link& link, const char* why, uint32_t qpn, Actions& act)
{
    if (link.state == LinkState::failed || link.state == LinkState::established) return;
    IWEMU_LOG(warn, "qp %u: no connection to qp %u (%s): QP to ERROR", qpn, link.remote_qpn, why);
    link.state = LinkState::failed;
    if (link.conn) act.destroy.push_back(link.conn);
    link.conn = 0;
    act.fail.push_back(link.qp);
}

void QpEndpoint::run(Actions& act)
{
    std::lock_guard r(run_lock_);
    {
        std::lock_guard g(lock_);
        if (stop_) return;  // being destroyed: the CM closes everything itself
    }
    for (cm::ConnectionId id : act.destroy) cm_->destroy(id);
    for (auto [id, reason] : act.reject) {
        std::array<uint8_t, cm::oob_private_data_size> pd{};
        cm::OobPrivateData rej;
        rej.kind = cm::OobKind::reject;
        rej.reason = static_cast<cm::OobRejectReason>(reason);
        cm::encode_oob_private_data(rej, pd);
        cm_->reject(id, pd);
    }
    for (auto& weak : act.fail) {
        auto qp = weak.lock();
        if (!qp) continue;
        QpAttr a;
        a.qp_state = QpState::err;
        qp->modify(a, qp_attr_state);  // flushes both queues
        AsyncEvent ev;
        ev.type = AsyncEventType::qp_fatal;
        ev.qp = qp.get();
        emu_.post_async_event(ev);
    }
}

// ---------------------------------------------------------------- CM events

void QpEndpoint::on_active_event(uint32_t qpn, uint64_t attempt, const cm::CmEvent& ev)
{
    Actions act;
    {
        std::lock_guard g(lock_);
        if (stop_) return;
        auto it = links_.find(qpn);
        if (it == links_.end() || it->second.attempt != attempt) {
            if (ev.type == cm::CmEventType::established) act.destroy.push_back(ev.connection);
        } else {
            Link& link = it->second;
            switch (ev.type) {
            case cm::CmEventType::established:
                link.state = LinkState::established;
                link.conn = 0;
                act.destroy.push_back(ev.connection);  // the socket is the QP's now
                IWEMU_LOG(info, "qp %u: connected to qp %u (initiator)", qpn, link.remote_qpn);
                break;
            case cm::CmEventType::connection_refused:
                // The peer's process may be slow to come up: retry within the deadline.
                link.conn = 0;
                if (Clock::now() + retry_interval_ < link.deadline) {
                    link.state = LinkState::backoff;
                    link.retry_at = Clock::now() + retry_interval_;
                } else {
                    fail_locked(link, "connection refused", qpn, act);
                }
                break;
            case cm::CmEventType::rejected: {
                auto pd = cm::decode_oob_private_data(ev.private_data);
                link.conn = 0;
                IWEMU_LOG(warn, "qp %u: qp %u refused: %s", qpn, link.remote_qpn,
                          pd ? cm::to_string(pd->reason) : "not an iwemu endpoint");
                fail_locked(link, "rejected", qpn, act);
                break;
            }
            case cm::CmEventType::disconnected:
                break;
            default:
                link.conn = 0;
                fail_locked(link, ev.reason.empty() ? "connect failed" : ev.reason.data(), qpn, act);
                break;
            }
        }
    }
    timer_cv_.notify_all();
    run(act);
}

void QpEndpoint::on_listener_event(const cm::CmEvent& ev)
{
    Actions act;
    std::shared_ptr<QueuePair> target;
    std::optional<cm::OobPrivateData> pd;
    if (ev.type == cm::CmEventType::connect_request) {
        pd = cm::decode_oob_private_data(ev.private_data);
        if (pd && pd->kind == cm::OobKind::request) target = emu_.find_qp(pd->target_qpn);  // before lock_
    }
    {
        std::lock_guard g(lock_);
        if (stop_) return;
        switch (ev.type) {
        case cm::CmEventType::connect_request: {
            auto reject = [&](cm::OobRejectReason r) { act.reject.emplace_back(ev.connection, static_cast<uint8_t>(r)); };
            if (!pd || pd->kind != cm::OobKind::request) {
                IWEMU_LOG(warn, "qp endpoint: Request without iwemu private data refused");
                reject(cm::OobRejectReason::none);
                break;
            }
            const uint32_t qpn = pd->target_qpn;
            const Gid source = sockaddr_to_gid(ev.peer_address);
            if (!target || (qpn >> 8) != port_of(ev.local_address)) {
                reject(cm::OobRejectReason::no_such_qp);
                break;
            }
            auto it = links_.find(qpn);
            if (it == links_.end()) {
                // The peer reached RTR first: hold the Request until ours.
                if (parked_.size() >= max_parked) {
                    reject(cm::OobRejectReason::qp_state);
                    break;
                }
                parked_[ev.connection] = Parked{qpn, pd->source_qpn, source, Clock::now() + timeout_ + mpa_timeout_};
                timer_cv_.notify_all();
                if (!timer_.joinable()) timer_ = std::thread([this] { timer_main(); });
                break;
            }
            Link& link = it->second;
            if (link.initiator) {
                reject(cm::OobRejectReason::not_responder);
            } else if (link.state != LinkState::awaiting_request) {
                reject(cm::OobRejectReason::qp_state);
            } else if (pd->source_qpn != link.remote_qpn || source != link.remote_gid) {
                IWEMU_LOG(warn, "qp %u: Request from qp %u refused: RTR named qp %u", qpn, pd->source_qpn,
                          link.remote_qpn);
                reject(cm::OobRejectReason::peer_mismatch);
            } else if (!accept_locked(qpn, link, ev.connection, act)) {
                reject(cm::OobRejectReason::qp_state);
            }
            break;
        }
        case cm::CmEventType::established:
            for (auto& [qpn, link] : links_) {
                if (link.conn == ev.connection && link.state == LinkState::accepting) {
                    link.state = LinkState::established;
                    link.conn = 0;
                    IWEMU_LOG(info, "qp %u: connected to qp %u (responder)", qpn, link.remote_qpn);
                    break;
                }
            }
            act.destroy.push_back(ev.connection);
            break;
        case cm::CmEventType::disconnected:
            break;
        default:  // timeout / connect_error: the Initiator vanished or attach failed
            parked_.erase(ev.connection);
            for (auto& [qpn, link] : links_) {
                if (link.conn == ev.connection && link.state == LinkState::accepting) {
                    link.conn = 0;  // the CM retired the id itself
                    fail_locked(link, ev.reason.empty() ? "startup failed" : ev.reason.data(), qpn, act);
                    break;
                }
            }
            break;
        }
    }
    run(act);
}

// ---------------------------------------------------------------- timers

void QpEndpoint::timer_main()
{
    std::unique_lock g(lock_);
    while (!stop_) {
        Actions act;
        const auto now = Clock::now();
        auto next = now + std::chrono::seconds(60);
        for (auto& [qpn, link] : links_) {
            switch (link.state) {
            case LinkState::backoff:
                if (now >= link.deadline) {
                    fail_locked(link, "peer never listened", qpn, act);
                } else if (now >= link.retry_at) {
                    start_connect_locked(qpn, link, act);
                } else {
                    next = std::min(next, link.retry_at);
                }
                break;
            case LinkState::awaiting_request:
                if (now >= link.deadline)
                    fail_locked(link, "no Request from the peer", qpn, act);
                else
                    next = std::min(next, link.deadline);
                break;
            default:
                break;
            }
        }
        for (auto pi = parked_.begin(); pi != parked_.end();) {
            if (now >= pi->second.expires) {
                act.reject.emplace_back(pi->first, static_cast<uint8_t>(cm::OobRejectReason::qp_state));
                pi = parked_.erase(pi);
            } else {
                next = std::min(next, pi->second.expires);
                ++pi;
            }
        }
        if (!act.fail.empty() || !act.reject.empty() || !act.destroy.empty()) {
            g.unlock();
            run(act);
            g.lock();
            continue;
        }
        timer_cv_.wait_until(g, next);
    }
}

}  // namespace iwemu
