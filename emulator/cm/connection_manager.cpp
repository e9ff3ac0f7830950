#include "emulator/cm/connection_manager.h"

#include <poll.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cassert>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <mutex>
#include <system_error>
#include <thread>
#include <unordered_map>
#include <vector>

#include "emulator/capture/stream_capture.h"
#include "emulator/cm/mpa_negotiation.h"
#include "emulator/cm/start_key_startup.h"
#include "emulator/cm/startup_state.h"
#include "emulator/cm/tcp_socket.h"
#include "emulator/faults/fault_injector.h"
#include "emulator/base/log.h"
#include "emulator/wire/fpdu.h"
#include "emulator/wire/start_key.h"
#include "emulator/wire/terminate_message.h"

namespace iwemu::cm {

namespace {

using Clock = std::chrono::steady_clock;

// epoll_event.data.u64: 0 = wake-up eventfd, listener ids carry the top bit,
// connection ids are plain.  Ids are never reused, so a stale event for a
// retired id finds nothing.
constexpr uint64_t wake_tag = 0;
constexpr uint64_t listener_tag = uint64_t{1} << 63;

// One startup frame at most (RFC 5044 §7.1.1); a Terminate FPDU is smaller.
constexpr size_t frame_buffer_size = wire::mpa_frame_header_size + wire::mpa_max_pd_length;
static_assert(frame_buffer_size >= wire::terminate_ulpdu_max_size + 2 + 3 + 4 + 2 * wire::mpa_marker_size);

// Back-off after accept() fails for lack of descriptors/memory, so a level-
// triggered listener does not spin.
constexpr auto accept_retry_delay = std::chrono::milliseconds(100);

// Connections accepted per wake-up of a listener at most.  The listener is
// level-triggered and comes straight back; meanwhile the connections just
// accepted get their turn to deliver a Request before later accepts can
// evict them, and other sockets are not starved by a flood of SYNs.
constexpr unsigned accept_batch = 16;

// Least depth of the kernel's accept queue behind a listener.  Since the cap
// evicts instead of pausing, the queue only bridges the time between two
// batches; a SYN dropped for lack of room is retransmitted after 1 s, 3 s ...
constexpr int accept_queue_min = 128;

// How long the CM thread stays without work before it exits.
constexpr auto idle_linger = std::chrono::milliseconds(500);

const char* rtr_name(RtrType rtr)
{
    switch (rtr) {
    case RtrType::none: return "none";
    case RtrType::zero_length_send: return "send";
    case RtrType::zero_length_write: return "write";
    case RtrType::zero_length_read: return "read";
    }
    return "?";
}

constexpr wire::TerminateCode mpa_invalid_frame{wire::TerminateLayer::llp, wire::etype::llp_mpa,
                                                wire::ecode::mpa_invalid_request_or_reply};

}  // namespace

std::string_view to_string(CmEventType type)
{
    switch (type) {
    case CmEventType::connect_request: return "connect_request";
    case CmEventType::established: return "established";
    case CmEventType::rejected: return "rejected";
    case CmEventType::connection_refused: return "connection_refused";
    case CmEventType::unreachable: return "unreachable";
    case CmEventType::timeout: return "timeout";
    case CmEventType::connect_error: return "connect_error";
    case CmEventType::disconnected: return "disconnected";
    }
    return "?";
}

// Why a listener has stopped accepting for a while (pause_listener_locked).
enum class ListenerPause : uint8_t {
    none,
    accept_backoff,    // accept() ran out of descriptors or memory: try again at resume_at
    waiting_for_room,  // at the half-open cap: resume when one leaves, or at resume_at (its grace is over)
};

struct ConnectionManager::Listener {
    ListenerId id = 0;
    int fd = -1;
    CmEventHandler handler;
    // Connections in awaiting_request, oldest first: the eviction order at
    // CmSettings::max_half_open_per_listener.  Intrusive, so joining and
    // leaving are O(1) without allocation.
    Connection* oldest_half_open = nullptr;
    Connection* newest_half_open = nullptr;
    unsigned half_open = 0;
    uint64_t evicted = 0;
    ListenerPause pause = ListenerPause::none;
    Clock::time_point resume_at{};  // while paused
};

struct ConnectionManager::Connection {
    ConnectionId id = 0;
    ListenerId listener = 0;
    bool active = false;
    bool visible = false;            // the ULP knows the id: events go out
    bool counted_half_open = false;  // on its listener's half-open list
    Connection* older_half_open = nullptr;
    Connection* newer_half_open = nullptr;
    Clock::time_point half_open_since{};
    StartupState state = StartupState::closed;
    int fd = -1;
    std::optional<Clock::time_point> deadline;
    sockaddr_storage local{};
    sockaddr_storage peer{};
    CmEventHandler handler;
    Endpoint endpoint;

    // Startup frame buffers, dropped at hand-off (bounded memory per
    // half-open connection, nothing kept per established one).
    struct Buffers {
        // One incoming startup frame, read with exact lengths so that no
        // octet after it (an FPDU) leaves the socket.
        std::array<uint8_t, frame_buffer_size> rx{};
        // One outgoing startup frame or Terminate FPDU.
        std::array<uint8_t, frame_buffer_size> tx{};
    };
    std::unique_ptr<Buffers> buf = std::make_unique<Buffers>();
    size_t rx_len = 0;
    size_t tx_len = 0;
    size_t tx_off = 0;

    // Active: where to (re)connect, and the reconnects so far (awaiting_retry).
    sockaddr_storage remote{};
    std::optional<sockaddr_storage> bind_address;
    unsigned retries = 0;
    Clock::time_point retry_at{};
    wire::MpaFrame request;        // active: the Request sent (private_data cleared)
    uint16_t ird = 0, ord = 0;     // active: the ULP's values
    RequestAssessment assessment;  // passive
    uint8_t peer_revision = 0;
    std::vector<uint8_t> peer_private_data;  // active: the Reply's, for `established`
    ConnectionParams params;       // negotiated, for the hand-off
    // draft-03 startup (start_key_startup.h): active from connect() in
    // start-key mode, passive once the peer's first octets read "MPA i".
    bool start_key = false;
    wire::StartKey our_key;
    wire::StartKey peer_key;
    std::optional<wire::TerminateCode> failure;  // sending_terminate
    std::string_view failure_reason;

    // Set while Endpoint::attach runs without the lock.
    bool destroyed = false;
    bool disconnect_pending = false;
    int disconnect_error = 0;
    // `disconnected` delivered; the id still forwards disconnect() (the ULP
    // closes its half after the peer's FIN) until destroy().
    bool disconnect_reported = false;
};

class ConnectionManager::Loop {
public:
    explicit Loop(const CmSettings& settings);
    ~Loop();

    int listen(const sockaddr* addr, socklen_t addr_len, int backlog, CmEventHandler handler,
               ListenerId* id, sockaddr_storage* bound);
    int stop_listening(ListenerId id);
    int accept(ConnectionId id, const AcceptArgs& args);
    int reject(ConnectionId id, std::span<const uint8_t> private_data);
    int connect(const ConnectArgs& args, ConnectionId* id);
    int disconnect(ConnectionId id, DisconnectMode mode);
    void notify_disconnected(ConnectionId id, int error);
    void destroy(ConnectionId id);
    int listener_stats(ListenerId id, ListenerStats* out);
    bool flush_answers(Clock::time_point deadline);

private:
    // Work for the CM thread to do without the lock.
    struct Action {
        enum class Kind : uint8_t { event, attach } kind = Kind::event;
        CmEventHandler handler;
        CmEvent event;
        ConnectionId id = 0;
        std::function<int(ConnectionId, const ConnectionParams&)> attach;
        ConnectionParams params;
    };

    void run();
    void run_actions(std::vector<Action>& actions);
    void finish_attach(ConnectionId id, int rc);
    int ensure_running_locked();
    void wake();
    bool idle_locked() const;
    int next_timeout_ms_locked() const;

    void dispatch_locked(const epoll_event& ev);
    void accept_ready_locked(Listener& l);
    void make_room_locked(Listener& l);
    unsigned half_open_cap() const { return std::max(settings_.max_half_open_per_listener, 1u); }
    bool room_after_grace_locked(Listener& l);
    void half_open_join_locked(Listener& l, Connection& c);
    void half_open_leave_locked(Connection& c);
    void pause_listener_locked(Listener& l, ListenerPause why, Clock::time_point resume_at);
    void resume_listener_locked(Listener& l);
    void connection_ready_locked(Connection& c, uint32_t events);
    void expire_locked(Clock::time_point now);

    void set_state_locked(Connection& c, StartupState to);
    void watch_locked(Connection& c, uint32_t events);
    void send_locked(Connection& c);
    void send_answer_locked(Connection& c, const AcceptArgs& args, StartupState next);
    void sent_locked(Connection& c);
    void receive_locked(Connection& c);
    void frame_received_locked(Connection& c, const wire::MpaParseResult& r);
    void request_received_locked(Connection& c, const wire::MpaFrame& frame);
    void reply_received_locked(Connection& c, const wire::MpaFrame& frame);
    void receive_start_key_locked(Connection& c);
    void start_key_answers_locked(Connection& c);
    void start_key_received_locked(Connection& c, const wire::StartKey& key);
    bool encode_start_key_locked(Connection& c);
    void hand_off_locked(Connection& c);
    void fail_locked(Connection& c, CmEventType type, int error,
                     std::optional<wire::TerminateCode> mpa_error, std::string_view reason);
    void reset_before_reply_locked(Connection& c, int error, std::string_view reason);
    void reconnect_locked(Connection& c);
    void retire_locked(Connection& c, bool abortive);
    void queue_event_locked(Connection& c, CmEvent event, std::vector<Action>* out = nullptr);
    CmEvent make_event(const Connection& c, CmEventType type) const;
    Connection* find_locked(ConnectionId id);
    bool encode_frame_locked(Connection& c, const wire::MpaFrame& frame);

    const CmSettings& settings_;
    int epfd_ = -1;
    int wakefd_ = -1;

    std::mutex mu_;
    std::thread thread_;
    bool running_ = false;
    bool stopping_ = false;
    uint64_t next_id_ = 1;
    std::unordered_map<ListenerId, std::unique_ptr<Listener>> listeners_;
    std::unordered_map<ConnectionId, std::unique_ptr<Connection>> connections_;
    std::vector<Action> actions_;
};

// ---------------------------------------------------------------- lifetime

ConnectionManager::Loop::Loop(const CmSettings& settings) : settings_(settings)
{
    epfd_ = ::epoll_create1(EPOLL_CLOEXEC);
    wakefd_ = ::eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    if (epfd_ >= 0 && wakefd_ >= 0) {
        epoll_event ev{};
        ev.events = EPOLLIN;
        ev.data.u64 = wake_tag;
        ::epoll_ctl(epfd_, EPOLL_CTL_ADD, wakefd_, &ev);
    }
}

ConnectionManager::Loop::~Loop()
{
    {
        std::lock_guard lock(mu_);
        stopping_ = true;
    }
    wake();
    if (thread_.joinable())
        thread_.join();
    // No thread any more: close what is still ours.  A connection in
    // handing_off had its attach pending, so its socket is still ours too.
    for (auto& [id, l] : listeners_)
        ::close(l->fd);
    for (auto& [id, c] : connections_)
        if ((cm_owns_socket(c->state) || c->state == StartupState::handing_off) && c->fd >= 0)
            close_abortive(c->fd);
    listeners_.clear();
    connections_.clear();
    if (wakefd_ >= 0)
        ::close(wakefd_);
    if (epfd_ >= 0)
        ::close(epfd_);
}

int ConnectionManager::Loop::ensure_running_locked()
{
    if (epfd_ < 0 || wakefd_ < 0)
        return -EMFILE;
    if (running_)
        return 0;
    // A thread that went idle released the lock before returning: joining it
    // here cannot deadlock.
    if (thread_.joinable())
        thread_.join();
    try {
        thread_ = std::thread([this] { run(); });
    } catch (const std::system_error&) {
        return -EAGAIN;
    }
    running_ = true;
    return 0;
}

void ConnectionManager::Loop::wake()
{
    const uint64_t one = 1;
    [[maybe_unused]] ssize_t n = ::write(wakefd_, &one, sizeof(one));
}

bool ConnectionManager::Loop::idle_locked() const
{
    if (!listeners_.empty() || !actions_.empty())
        return false;
    for (const auto& [id, c] : connections_)
        if (cm_owns_socket(c->state) || c->state == StartupState::handing_off)
            return false;
    return true;
}

int ConnectionManager::Loop::next_timeout_ms_locked() const
{
    std::optional<Clock::time_point> next;
    auto consider = [&next](const std::optional<Clock::time_point>& t) {
        if (t && (!next || *t < *next))
            next = t;
    };
    for (const auto& [id, c] : connections_) {
        consider(c->deadline);
        if (c->state == StartupState::awaiting_retry)
            consider(c->retry_at);
    }
    for (const auto& [id, l] : listeners_)
        if (l->pause != ListenerPause::none)
            consider(l->resume_at);
    if (!next)
        return -1;
    const auto left = std::chrono::ceil<std::chrono::milliseconds>(*next - Clock::now()).count();
    return left <= 0 ? 0 : static_cast<int>(std::min<long long>(left, 60'000));
}

// ---------------------------------------------------------------- CM thread

void ConnectionManager::Loop::run()
{
    std::array<epoll_event, 32> events;
    std::vector<Action> todo;
    std::optional<Clock::time_point> idle_since;
    for (;;) {
        int timeout_ms;
        {
            std::lock_guard lock(mu_);
            if (stopping_)
                return;
            if (!idle_locked()) {
                idle_since.reset();
                timeout_ms = actions_.empty() ? next_timeout_ms_locked() : 0;
            } else {
                // Linger a little so a client connecting now and then does
                // not pay a thread start per connection.
                const auto now = Clock::now();
                if (!idle_since)
                    idle_since = now;
                if (now - *idle_since >= idle_linger) {
                    running_ = false;  // the next API call starts a new thread
                    return;
                }
                timeout_ms = static_cast<int>(
                    std::chrono::ceil<std::chrono::milliseconds>(*idle_since + idle_linger - now).count());
            }
        }
        const int n = ::epoll_wait(epfd_, events.data(), static_cast<int>(events.size()), timeout_ms);
        {
            std::lock_guard lock(mu_);
            if (stopping_)
                return;
            for (int i = 0; i < n; ++i)
                dispatch_locked(events[static_cast<size_t>(i)]);
            expire_locked(Clock::now());
            todo.swap(actions_);
        }
        run_actions(todo);
        todo.clear();
    }
}

void ConnectionManager::Loop::run_actions(std::vector<Action>& actions)
{
    for (Action& a : actions) {
        if (a.kind == Action::Kind::event) {
            try {
                if (a.handler)
                    a.handler(a.event);
            } catch (...) {
                // A ULP bug must not take connection setup down for everyone.
            }
            continue;
        }
        int rc = -EINVAL;
        try {
            if (a.attach)
                rc = a.attach(a.id, a.params);
        } catch (...) {
            rc = -EINVAL;
        }
        finish_attach(a.id, rc);
    }
}

void ConnectionManager::Loop::finish_attach(ConnectionId id, int rc)
{
    // Events of this connection go out right here, ahead of anything queued
    // meanwhile, so `established` always precedes `disconnected`.
    std::vector<Action> out;
    {
        std::lock_guard lock(mu_);
        Connection* c = find_locked(id);
        if (!c)
            return;
        if (rc != 0) {
            // The QP did not take the socket: it is still ours to close.
            fail_locked(*c, CmEventType::connect_error, rc < 0 ? -rc : EINVAL, std::nullopt,
                        "endpoint refused the connection");
            return;
        }
        if (c->destroyed) {
            connections_.erase(id);  // the QP owns the socket; nobody listens
            return;
        }
        set_state_locked(*c, StartupState::established);
        CmEvent ev = make_event(*c, CmEventType::established);
        ev.params = c->params;
        ev.ird = c->params.ird;
        ev.ord = c->params.ord;
        if (c->active)
            ev.private_data = std::move(c->peer_private_data);
        c->peer_private_data = {};
        queue_event_locked(*c, std::move(ev), &out);
        if (c->disconnect_pending) {
            CmEvent dv = make_event(*c, CmEventType::disconnected);
            dv.error = c->disconnect_error;
            queue_event_locked(*c, std::move(dv), &out);
            c->disconnect_reported = true;
        }
    }
    run_actions(out);
}

void ConnectionManager::Loop::dispatch_locked(const epoll_event& ev)
{
    if (ev.data.u64 == wake_tag) {
        uint64_t v;
        [[maybe_unused]] ssize_t n = ::read(wakefd_, &v, sizeof(v));
        return;
    }
    if (ev.data.u64 & listener_tag) {
        auto it = listeners_.find(ev.data.u64 & ~listener_tag);
        if (it != listeners_.end())
            accept_ready_locked(*it->second);
        return;
    }
    if (Connection* c = find_locked(ev.data.u64))
        connection_ready_locked(*c, ev.events);
}

void ConnectionManager::Loop::accept_ready_locked(Listener& l)
{
    // No more than the cap per batch: every connection gets one turn of the
    // loop (its Request read if it came) before it can be the oldest.
    const unsigned batch = std::min(accept_batch, half_open_cap());
    for (unsigned i = 0; i < batch; ++i) {
        if (l.half_open >= half_open_cap() && !room_after_grace_locked(l))
            return;
        const int fd = ::accept4(l.fd, nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC);
        if (fd < 0) {
            if (errno == EINTR || errno == ECONNABORTED)
                continue;
            if (errno == EAGAIN || errno == EWOULDBLOCK)
                return;
            // Out of descriptors or memory: try again later instead of spinning.
            pause_listener_locked(l, ListenerPause::accept_backoff, Clock::now() + accept_retry_delay);
            return;
        }
        // Room is made only for a connection really accepted: a spurious
        // wake-up never costs anyone a slot.
        if (l.half_open >= half_open_cap())
            make_room_locked(l);
        set_nodelay(fd);
        if (capture::on()) capture::begin(fd, false);
        auto c = std::make_unique<Connection>();
        c->id = next_id_++;
        c->listener = l.id;
        c->fd = fd;
        c->state = StartupState::awaiting_request;
        c->deadline = Clock::now() + settings_.mpa_timeout;  // RFC 5044 §7.1.2 rule 8
        c->handler = l.handler;
        local_address(fd, &c->local);
        peer_address(fd, &c->peer);
        epoll_event ev{};
        ev.events = EPOLLIN | EPOLLRDHUP;
        ev.data.u64 = c->id;
        if (::epoll_ctl(epfd_, EPOLL_CTL_ADD, fd, &ev) != 0) {
            ::close(fd);
            continue;
        }
        half_open_join_locked(l, *c);
        connections_.emplace(c->id, std::move(c));
    }
}

// At the cap: the oldest connection without a complete Request, past its
// grace, makes way for the one just accepted.  room_after_grace_locked read
// it just before the accept, so a client whose Request already sat in its
// socket buffer (accepted in a burst, not served yet) has moved on; only
// one that has really sent nothing complete is closed.  One receive and at
// most one close per accept.
void ConnectionManager::Loop::make_room_locked(Listener& l)
{
    Connection& victim = *l.oldest_half_open;
    if (l.evicted++ == 0 || log_enabled(LogLevel::debug)) {
        // Once per listener at warn (an attack, or more simultaneous clients
        // than the cap), every time at debug.
        char peer[64];
        log_message(l.evicted == 1 ? LogLevel::warn : LogLevel::debug,
                    "cm: %u connections without a complete MPA Request on one listener: "
                    "closing the oldest (from %s) to accept a new one",
                    l.half_open, format_address(victim.peer, peer, sizeof(peer)));
    }
    // Not visible: no event.  RST, so nothing lingers on our side.
    retire_locked(victim, true);
}

// At the cap, before accepting: room for one more?  The oldest connection
// without a complete Request is read first (its Request may sit in its
// socket buffer).  Still incomplete and within its grace: the listener waits
// (new connections stay in the kernel's queue) until it completes, fails or
// has had its grace; then make_room_locked closes it for the newcomer.
bool ConnectionManager::Loop::room_after_grace_locked(Listener& l)
{
    receive_locked(*l.oldest_half_open);  // may complete its Request, or fail it
    if (l.half_open < half_open_cap())
        return true;
    const Clock::time_point evict_at = l.oldest_half_open->half_open_since + settings_.half_open_grace;
    if (Clock::now() >= evict_at)
        return true;
    pause_listener_locked(l, ListenerPause::waiting_for_room, evict_at);
    return false;
}

void ConnectionManager::Loop::half_open_join_locked(Listener& l, Connection& c)
{
    c.half_open_since = Clock::now();
    c.counted_half_open = true;
    c.older_half_open = l.newest_half_open;
    c.newer_half_open = nullptr;
    if (l.newest_half_open)
        l.newest_half_open->newer_half_open = &c;
    else
        l.oldest_half_open = &c;
    l.newest_half_open = &c;
    ++l.half_open;
}

void ConnectionManager::Loop::half_open_leave_locked(Connection& c)
{
    if (!c.counted_half_open)
        return;
    c.counted_half_open = false;
    auto it = listeners_.find(c.listener);
    assert(it != listeners_.end());  // stop_listening retires them first
    Listener& l = *it->second;
    (c.older_half_open ? c.older_half_open->newer_half_open : l.oldest_half_open) = c.newer_half_open;
    (c.newer_half_open ? c.newer_half_open->older_half_open : l.newest_half_open) = c.older_half_open;
    c.older_half_open = c.newer_half_open = nullptr;
    --l.half_open;
    if (l.pause == ListenerPause::waiting_for_room)
        resume_listener_locked(l);  // room now: the kernel's queue drains
}

void ConnectionManager::Loop::pause_listener_locked(Listener& l, ListenerPause why, Clock::time_point resume_at)
{
    epoll_event ev{};
    ev.events = 0;
    ev.data.u64 = l.id | listener_tag;
    ::epoll_ctl(epfd_, EPOLL_CTL_MOD, l.fd, &ev);
    l.pause = why;
    l.resume_at = resume_at;
}

void ConnectionManager::Loop::resume_listener_locked(Listener& l)
{
    epoll_event ev{};
    ev.events = EPOLLIN;
    ev.data.u64 = l.id | listener_tag;
    ::epoll_ctl(epfd_, EPOLL_CTL_MOD, l.fd, &ev);
    l.pause = ListenerPause::none;
}

void ConnectionManager::Loop::expire_locked(Clock::time_point now)
{
    std::vector<ConnectionId> expired;
    for (const auto& [id, c] : connections_)
        if (c->deadline && *c->deadline <= now)
            expired.push_back(id);
    for (ConnectionId id : expired)
        if (Connection* c = find_locked(id))
            fail_locked(*c, CmEventType::timeout, ETIMEDOUT, std::nullopt, "MPA startup timed out");
    std::vector<ConnectionId> due;
    for (const auto& [id, c] : connections_)
        if (c->state == StartupState::awaiting_retry && c->retry_at <= now)
            due.push_back(id);
    for (ConnectionId id : due)
        if (Connection* c = find_locked(id))
            reconnect_locked(*c);
    for (auto& [id, l] : listeners_)
        if (l->pause != ListenerPause::none && l->resume_at <= now)
            resume_listener_locked(*l);
}

void ConnectionManager::Loop::connection_ready_locked(Connection& c, uint32_t events)
{
    switch (c.state) {
    case StartupState::tcp_connecting: {
        const int err = socket_error(c.fd);
        if (err == ECONNREFUSED && c.retries > 0) {
            // The server that just reset us is not listening again yet.
            reset_before_reply_locked(c, err, "TCP connect refused on a reconnect");
            return;
        }
        if (err != 0) {
            fail_locked(c, err == ECONNREFUSED ? CmEventType::connection_refused : CmEventType::unreachable,
                        err, std::nullopt, "TCP connect failed");
            return;
        }
        if (!(events & EPOLLOUT))
            return;
        local_address(c.fd, &c.local);
        peer_address(c.fd, &c.peer);
        if (capture::on()) capture::begin(c.fd, true);
        set_state_locked(c, c.start_key ? StartupState::sending_start_key : StartupState::sending_request);
        send_locked(c);
        return;
    }
    case StartupState::sending_start_key:
    case StartupState::answering_start_key:
    case StartupState::sending_request:
    case StartupState::sending_rtr_frame:
    case StartupState::sending_terminate:
    case StartupState::sending_reply:
    case StartupState::sending_reject:
        send_locked(c);  // a dead peer shows up as a send error
        return;
    case StartupState::awaiting_reply:
    case StartupState::awaiting_request:
    case StartupState::awaiting_rtr_frame:
    case StartupState::awaiting_start_key:
        receive_locked(c);
        return;
    case StartupState::awaiting_ulp:
        // Only hang-ups are watched here: a well-behaved Initiator sends
        // nothing after its Request (RFC 5044 §7.1.2 rule 3), and octets it
        // does send stay in the socket for the QP.
        if (events & (EPOLLRDHUP | EPOLLHUP | EPOLLERR))
            fail_locked(c, CmEventType::connect_error, ECONNRESET, std::nullopt,
                        "peer closed before the connection was accepted");
        return;
    case StartupState::awaiting_retry:  // no socket: a stale event
    case StartupState::handing_off:
    case StartupState::established:
    case StartupState::closed:
        return;
    }
}

// ---------------------------------------------------------------- startup I/O

void ConnectionManager::Loop::set_state_locked(Connection& c, StartupState to)
{
    assert(startup_transition_allowed(c.state, to));
    if (to != StartupState::awaiting_request)
        half_open_leave_locked(c);
    c.state = to;
}

void ConnectionManager::Loop::watch_locked(Connection& c, uint32_t events)
{
    epoll_event ev{};
    ev.events = events;
    ev.data.u64 = c.id;
    ::epoll_ctl(epfd_, EPOLL_CTL_MOD, c.fd, &ev);
}

bool ConnectionManager::Loop::encode_frame_locked(Connection& c, const wire::MpaFrame& frame)
{
    c.tx_len = wire::encode_mpa_frame(frame, c.buf->tx);
    c.tx_off = 0;
    return c.tx_len != 0;
}

void ConnectionManager::Loop::send_locked(Connection& c)
{
    while (c.tx_off < c.tx_len) {
        const ssize_t n = capture::on() ? capture::send(c.fd, c.buf->tx.data() + c.tx_off, c.tx_len - c.tx_off, MSG_NOSIGNAL)
                                         : ::send(c.fd, c.buf->tx.data() + c.tx_off, c.tx_len - c.tx_off, MSG_NOSIGNAL);
        if (n > 0) {
            c.tx_off += static_cast<size_t>(n);
            continue;
        }
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
            watch_locked(c, EPOLLOUT);
            return;
        }
        const int err = n < 0 ? errno : ECONNRESET;
        if ((c.state == StartupState::sending_request || c.state == StartupState::sending_start_key) &&
            (err == ECONNRESET || err == EPIPE))
            reset_before_reply_locked(c, err, "peer went away before the MPA Request was out");
        else
            fail_locked(c, CmEventType::connect_error, err, std::nullopt, "peer went away during MPA startup");
        return;
    }
    sent_locked(c);
}

void ConnectionManager::Loop::sent_locked(Connection& c)
{
    switch (c.state) {
    case StartupState::sending_request:
        set_state_locked(c, StartupState::awaiting_reply);
        c.rx_len = 0;
        watch_locked(c, EPOLLIN | EPOLLRDHUP);
        return;
    case StartupState::sending_rtr_frame:
        hand_off_locked(c);
        return;
    case StartupState::sending_start_key:  // rule 4: nothing more before the peer's key
        set_state_locked(c, StartupState::awaiting_start_key);
        c.rx_len = 0;
        watch_locked(c, EPOLLIN | EPOLLRDHUP);
        return;
    case StartupState::answering_start_key:  // rule 5 is the QP's: no FPDU before the peer's first
        hand_off_locked(c);
        return;
    case StartupState::sending_reply:
        if (c.assessment.seed002_rtr) {
            set_state_locked(c, StartupState::awaiting_rtr_frame);
            c.rx_len = 0;
            watch_locked(c, EPOLLIN | EPOLLRDHUP);
        } else {
            hand_off_locked(c);
        }
        return;
    case StartupState::sending_reject:
        // RFC 5044 §7.1.2 rule 2 leaves TCP to the ULP; rdma_cm has no use
        // for it, so close after the Reply is out.
        retire_locked(c, false);
        return;
    case StartupState::sending_terminate:
        fail_locked(c, CmEventType::connect_error, EPROTO, c.failure, c.failure_reason);
        return;
    default:
        return;
    }
}

void ConnectionManager::Loop::receive_locked(Connection& c)
{
    // A Start Key may open the stream (Responder), or answer our Request
    // (Initiator: a start-key-mode Responder, followed when permissive).
    const bool may_be_start_key =
        (c.state == StartupState::awaiting_request || c.state == StartupState::awaiting_reply) &&
        recognises_start_key(settings_);
    if (may_be_start_key && !c.start_key &&
        wire::classify_startup({c.buf->rx.data(), c.rx_len}) == wire::StartupForm::start_key)
        start_key_answers_locked(c);
    if (c.state == StartupState::awaiting_start_key || (c.state == StartupState::awaiting_request && c.start_key)) {
        receive_start_key_locked(c);
        return;
    }
    const wire::MpaFrameType expected = c.state == StartupState::awaiting_reply     ? wire::MpaFrameType::reply
                                        : c.state == StartupState::awaiting_request ? wire::MpaFrameType::request
                                                                                    : wire::MpaFrameType::rtr;
    for (;;) {
        const wire::MpaParseResult r = wire::parse_mpa_frame({c.buf->rx.data(), c.rx_len}, expected, false,
                                                              /*accept_rev0=*/true);  // judged in mpa_negotiation
        if (r.status == wire::MpaParseStatus::complete) {
            frame_received_locked(c, r);
            return;
        }
        if (r.status != wire::MpaParseStatus::need_more || c.rx_len + r.need > c.buf->rx.size()) {
            fail_locked(c, CmEventType::connect_error, EPROTO, wire::terminate_code(r.status).value_or(mpa_invalid_frame),
                        wire::to_string(r.status));
            return;
        }
        // Exactly what the frame still lacks, never more: the octets after
        // it belong to the QP (siw as Responder sends FPDUs right after its Reply).
        // Where a Start Key may come, no more than its 16 octets until the
        // form is known: its sender then waits for us (seed 000 §8.1 rule 4).
        size_t need = r.need;
        if (may_be_start_key && c.rx_len < wire::start_key_size)
            need = std::min(need, wire::start_key_size - c.rx_len);
        const ssize_t n = capture::on() ? capture::recv(c.fd, c.buf->rx.data() + c.rx_len, need, 0, 0)
                                         : ::recv(c.fd, c.buf->rx.data() + c.rx_len, need, 0);
        if (n > 0) {
            c.rx_len += static_cast<size_t>(n);
            if (may_be_start_key && wire::classify_startup({c.buf->rx.data(), c.rx_len}) == wire::StartupForm::start_key) {
                start_key_answers_locked(c);
                receive_start_key_locked(c);
                return;
            }
            continue;
        }
        if (n == 0) {
            if (c.rx_len == 0 && c.state == StartupState::awaiting_reply)
                reset_before_reply_locked(c, ECONNRESET, "peer closed before its MPA Reply");
            else if (c.rx_len == 0)
                fail_locked(c, CmEventType::connect_error, ECONNRESET, std::nullopt,
                            "peer closed during MPA startup");
            else
                fail_locked(c, CmEventType::connect_error, EPROTO, mpa_invalid_frame,
                            wire::to_string(wire::MpaParseStatus::truncated));
            return;
        }
        if (errno == EINTR)
            continue;
        if (errno == EAGAIN || errno == EWOULDBLOCK)
            return;
        if (errno == ECONNRESET && c.rx_len == 0 && c.state == StartupState::awaiting_reply) {
            reset_before_reply_locked(c, ECONNRESET, "peer reset before its MPA Reply");
            return;
        }
        fail_locked(c, CmEventType::connect_error, errno, std::nullopt, "receive failed during MPA startup");
        return;
    }
}

void ConnectionManager::Loop::frame_received_locked(Connection& c, const wire::MpaParseResult& r)
{
    switch (c.state) {
    case StartupState::awaiting_request:
        request_received_locked(c, r.frame);
        return;
    case StartupState::awaiting_reply:
        reply_received_locked(c, r.frame);
        return;
    case StartupState::awaiting_rtr_frame:
        hand_off_locked(c);  // the seed-002 Rtr frame: go
        return;
    default:
        return;
    }
}

void ConnectionManager::Loop::request_received_locked(Connection& c, const wire::MpaFrame& frame)
{
    if (settings_.start_key) {
        // A start-key-mode Responder is the draft's "Active" side: the
        // Request is the Initiator's declaration (its M and C), answered on
        // accept() with our Start Key, which a permissive Initiator follows.
        wire::StartKey declared;
        declared.marker = frame.marker;
        declared.crc = frame.crc;
        c.start_key = true;
        c.peer_key = declared;
        set_state_locked(c, StartupState::awaiting_ulp);
        c.deadline.reset();
        c.visible = true;
        watch_locked(c, EPOLLRDHUP);
        CmEvent ev = make_event(c, CmEventType::connect_request);
        ev.private_data.assign(frame.private_data.begin(), frame.private_data.end());
        ev.max_reply_private_data = 0;
        queue_event_locked(c, std::move(ev));
        return;
    }
    c.assessment = assess_request(settings_, frame);
    c.peer_revision = frame.rev;
    switch (c.assessment.verdict) {
    case RequestAssessment::Verdict::close:
        // RFC 6581 §10: not ours to answer; nobody knows the id.
        fail_locked(c, CmEventType::connect_error, EPROTO, mpa_invalid_frame, c.assessment.reason);
        return;
    case RequestAssessment::Verdict::reject:
        set_state_locked(c, StartupState::sending_reject);
        if (!encode_frame_locked(c, make_reject(settings_, c.assessment))) {
            retire_locked(c, false);
            return;
        }
        send_locked(c);
        return;
    case RequestAssessment::Verdict::offer_to_ulp:
        break;
    }
    if (capture::on()) {  // IWEMU_FAULTS reject (emulator/faults/fault_injector.h)
        if (const auto text = faults::reject_request(c.fd)) {
            wire::MpaFrame reply = make_reject(settings_, c.assessment);
            reply.private_data = {reinterpret_cast<const uint8_t*>(text->data()),
                                  std::min(text->size(), max_sent_ulp_private_data(settings_, c.assessment.enhanced))};
            set_state_locked(c, StartupState::sending_reject);
            if (!encode_frame_locked(c, reply)) {
                retire_locked(c, false);
                return;
            }
            send_locked(c);
            return;
        }
    }
    set_state_locked(c, StartupState::awaiting_ulp);
    c.deadline.reset();  // the ULP decides in its own time
    c.visible = true;
    watch_locked(c, EPOLLRDHUP);

    CmEvent ev = make_event(c, CmEventType::connect_request);
    ev.private_data.assign(frame.private_data.begin(), frame.private_data.end());
    ev.ird = c.assessment.peer_ird;
    ev.ord = c.assessment.peer_ord;
    ev.peer_to_peer = c.assessment.peer_to_peer;
    ev.max_reply_private_data = max_sent_ulp_private_data(settings_, c.assessment.enhanced);
    queue_event_locked(c, std::move(ev));
}

void ConnectionManager::Loop::reply_received_locked(Connection& c, const wire::MpaFrame& frame)
{
    c.peer_revision = frame.rev;
    c.peer_private_data.assign(frame.private_data.begin(), frame.private_data.end());
    ReplyOutcome o = evaluate_reply(settings_, c.request, frame, c.ird, c.ord);
    switch (o.verdict) {
    case ReplyOutcome::Verdict::close:
        fail_locked(c, CmEventType::connect_error, EPROTO, o.error, o.reason);
        return;
    case ReplyOutcome::Verdict::rejected: {
        CmEvent ev = make_event(c, CmEventType::rejected);
        ev.private_data = std::move(c.peer_private_data);
        if (frame.enhanced) {  // RFC 6581 §9.1: the ULP sees the peer's IRD/ORD on reject too
            ev.ird = frame.enhanced->ird;
            ev.ord = frame.enhanced->ord;
        }
        ev.error = ECONNREFUSED;
        ev.reason = o.reason;
        queue_event_locked(c, std::move(ev));
        c.visible = false;
        retire_locked(c, false);
        return;
    }
    case ReplyOutcome::Verdict::terminate: {
        // RFC 6581 §9.1/§9.2: the Initiator ends with a Terminate, the first
        // (and only) FPDU of this connection, framed as negotiated.
        std::array<uint8_t, wire::terminate_ulpdu_max_size> ulpdu{};
        const wire::TerminateCause cause{*o.error, {}, std::nullopt};
        const size_t ulen = wire::build_terminate_ulpdu(cause, 1, ulpdu);
        const size_t flen = ulen == 0 ? 0
                                      : wire::encode_fpdu(c.buf->tx, {ulpdu.data(), ulen}, {}, 0,
                                                          wire::FpduFraming{o.params.tx.crc, o.params.tx.markers});
        if (flen == 0) {
            fail_locked(c, CmEventType::connect_error, EPROTO, o.error, o.reason);
            return;
        }
        c.tx_len = flen;
        c.tx_off = 0;
        c.failure = o.error;
        c.failure_reason = o.reason;
        set_state_locked(c, StartupState::sending_terminate);
        send_locked(c);
        return;
    }
    case ReplyOutcome::Verdict::established:
        break;
    }
    c.params = o.params;
    if (o.send_rtr_frame) {
        set_state_locked(c, StartupState::sending_rtr_frame);
        if (!encode_frame_locked(c, make_rtr_frame(frame.crc))) {
            fail_locked(c, CmEventType::connect_error, EPROTO, std::nullopt, "cannot encode the Rtr frame");
            return;
        }
        send_locked(c);
        return;
    }
    hand_off_locked(c);
}

// The peer's Start Key (seed 000 §8.1.1), read with exact lengths like the
// frames.  Error 4 (§9: "invalid Start Key") and Rev != 0 close at once.
void ConnectionManager::Loop::receive_start_key_locked(Connection& c)
{
    for (;;) {
        const wire::StartKeyParseResult k = wire::parse_start_key({c.buf->rx.data(), c.rx_len});
        if (k.status == wire::StartKeyParseStatus::complete) {
            // A variant layout's zero Rev octet / PD_Length may have come
            // with the key.  By the role order nothing else can be there
            // yet, so it counts only if it is all there is: never the zero
            // marker that opens a first FPDU (rule 7).
            std::array<uint8_t, wire::start_key_max_trailer + 5> t{};
            const ssize_t p = ::recv(c.fd, t.data(), t.size(), MSG_PEEK | MSG_DONTWAIT);
            const size_t there = p > 0 ? static_cast<size_t>(p) : 0;
            const size_t extra = there <= wire::start_key_max_trailer &&
                                         wire::start_key_trailer_size({t.data(), there}) == there
                                     ? there
                                     : 0;
            if (extra != 0) {
                [[maybe_unused]] const ssize_t got = capture::on() ? capture::recv(c.fd, t.data(), extra, 0, 0)
                                                                    : ::recv(c.fd, t.data(), extra, 0);
            }
            start_key_received_locked(c, k.key);
            return;
        }
        if (k.status != wire::StartKeyParseStatus::need_more) {  // closed, nothing sent; logged at info
            fail_locked(c, CmEventType::connect_error, EPROTO, wire::terminate_code(k.status),
                        wire::to_string(k.status));
            return;
        }
        const ssize_t n = capture::on() ? capture::recv(c.fd, c.buf->rx.data() + c.rx_len, k.need, 0, 0)
                                         : ::recv(c.fd, c.buf->rx.data() + c.rx_len, k.need, 0);
        if (n > 0) {
            c.rx_len += static_cast<size_t>(n);
            continue;
        }
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
            return;
        if (c.state == StartupState::awaiting_start_key && c.rx_len == 0) {
            if (n == 0) {
                // §13.3: a Responder rejects by closing without its key.
                CmEvent ev = make_event(c, CmEventType::rejected);
                ev.error = ECONNREFUSED;
                ev.reason = "Responder closed without a Start Key (draft-03 reject)";
                queue_event_locked(c, std::move(ev));
                c.visible = false;
                retire_locked(c, false);
            } else if (errno == ECONNRESET) {
                reset_before_reply_locked(c, ECONNRESET, "peer reset before its Start Key");
            } else {
                fail_locked(c, CmEventType::connect_error, errno, std::nullopt, "receive failed during MPA startup");
            }
            return;
        }
        if (n == 0)
            fail_locked(c, CmEventType::connect_error, c.rx_len == 0 ? ECONNRESET : EPROTO,
                        c.rx_len == 0 ? std::nullopt : wire::terminate_code(wire::StartKeyParseStatus::truncated),
                        wire::to_string(c.rx_len == 0 ? wire::StartKeyParseStatus::need_more
                                                      : wire::StartKeyParseStatus::truncated));
        else
            fail_locked(c, CmEventType::connect_error, errno, std::nullopt, "receive failed during MPA startup");
        return;
    }
}

// The peer's first octets read "MPA i": a Start Key.  An Initiator that
// sent a Request takes it as the answer of a start-key-mode Responder; its
// own "key" is then what its Request declared (M, C).
void ConnectionManager::Loop::start_key_answers_locked(Connection& c)
{
    c.start_key = true;
    if (c.state == StartupState::awaiting_reply) {
        c.our_key.marker = c.request.marker;
        c.our_key.crc = c.request.crc;
        set_state_locked(c, StartupState::awaiting_start_key);
    }
}

void ConnectionManager::Loop::start_key_received_locked(Connection& c, const wire::StartKey& key)
{
    c.peer_key = key;
    c.peer_revision = 0;
    if (c.active) {  // we are the draft's "Passive" side: both keys in, FPDUs may go (rule 4)
        c.params = start_key_params(settings_, c.our_key, key, ConnectionRole::initiator, c.ird, c.ord);
        hand_off_locked(c);
        return;
    }
    // Responder ("Active"): the ULP decides; our key goes out on accept().
    set_state_locked(c, StartupState::awaiting_ulp);
    c.deadline.reset();
    c.visible = true;
    watch_locked(c, EPOLLRDHUP);
    CmEvent ev = make_event(c, CmEventType::connect_request);
    ev.max_reply_private_data = 0;  // draft-03 has no Private Data in MPA
    queue_event_locked(c, std::move(ev));
}

bool ConnectionManager::Loop::encode_start_key_locked(Connection& c)
{
    c.our_key = make_start_key(settings_);
    c.tx_len = wire::encode_start_key(c.our_key, c.buf->tx);
    c.tx_off = 0;
    return c.tx_len != 0;
}

void ConnectionManager::Loop::hand_off_locked(Connection& c)
{
    ::epoll_ctl(epfd_, EPOLL_CTL_DEL, c.fd, nullptr);
    set_state_locked(c, StartupState::handing_off);
    c.deadline.reset();
    c.params.fd = c.fd;
    c.params.mulpdu = wire::mpa_mulpdu(effective_mss(c.fd), c.params.tx.markers);
    c.buf.reset();
    if (log_enabled(LogLevel::debug)) {
        char peer[64];
        const ConnectionParams& p = c.params;
        log_message(LogLevel::debug,
                    "cm: %s %s: MPA rev %u%s, DDP/RDMAP v%u, CRC tx/rx %d/%d, markers tx/rx %d/%d, RTR %s, IRD %u ORD %u, MULPDU %u",
                    c.active ? "connected to" : "accepted", format_address(c.peer, peer, sizeof(peer)),
                    p.mpa_revision, c.start_key ? " (draft-03 Start Key)" : "", p.ddp_rdmap_version, p.tx.crc, p.rx.crc, p.tx.markers, p.rx.markers, rtr_name(p.rtr),
                    p.ird, p.ord, p.mulpdu);
    }
    Action a;
    a.kind = Action::Kind::attach;
    a.id = c.id;
    a.attach = c.endpoint.attach;
    a.params = c.params;
    actions_.push_back(std::move(a));
}

void ConnectionManager::Loop::fail_locked(Connection& c, CmEventType type, int error,
                                          std::optional<wire::TerminateCode> mpa_error,
                                          std::string_view reason)
{
    if (log_enabled(LogLevel::info)) {
        char peer[64];
        log_message(LogLevel::info, "cm: %s %s failed in %s: %.*s (%s)", c.active ? "connection to" : "connection from",
                    format_address(c.peer, peer, sizeof(peer)), to_string(c.state).data(),
                    static_cast<int>(reason.size()), reason.data(), std::strerror(error));
    }
    if (c.visible && !c.destroyed) {
        CmEvent ev = make_event(c, type);
        ev.error = error;
        ev.mpa_error = mpa_error;
        ev.reason = reason;
        queue_event_locked(c, std::move(ev));
    }
    retire_locked(c, false);
}

// An active connection closed or reset by its peer before any octet of the
// Reply: a port forwarder that accepted for a server not listening (yet).
// Connect again after a pause (CmSettings::connect_retries); the Request is
// sent anew, nothing of the old stream is kept.
void ConnectionManager::Loop::reset_before_reply_locked(Connection& c, int error, std::string_view reason)
{
    constexpr auto first_pause = std::chrono::milliseconds(10);
    constexpr auto longest_pause = std::chrono::milliseconds(160);
    const auto pause = std::min<Clock::duration>(first_pause * (1u << std::min(c.retries, 4u)), longest_pause);
    const auto now = Clock::now();
    if (!c.active || c.retries >= settings_.connect_retries || (c.deadline && now + pause >= *c.deadline)) {
        fail_locked(c, CmEventType::connect_error, error, std::nullopt, reason);
        return;
    }
    IWEMU_LOG(info, "cm: connection %llu: %.*s; connecting again in %lld ms", static_cast<unsigned long long>(c.id),
              static_cast<int>(reason.size()), reason.data(),
              static_cast<long long>(std::chrono::duration_cast<std::chrono::milliseconds>(pause).count()));
    ::epoll_ctl(epfd_, EPOLL_CTL_DEL, c.fd, nullptr);
    ::close(c.fd);
    c.fd = -1;
    ++c.retries;
    c.retry_at = now + pause;
    set_state_locked(c, StartupState::awaiting_retry);
}

void ConnectionManager::Loop::reconnect_locked(Connection& c)
{
    int connect_errno = 0;
    const int fd = start_connect(c.remote, c.bind_address, &connect_errno);
    if (fd < 0) {
        fail_locked(c, CmEventType::connect_error, -fd, std::nullopt, "socket for a reconnect failed");
        return;
    }
    c.fd = fd;
    c.tx_off = 0;  // the Request, encoded once, goes out whole again
    c.rx_len = 0;
    set_state_locked(c, StartupState::tcp_connecting);
    local_address(fd, &c.local);
    epoll_event ev{};
    ev.events = EPOLLOUT;
    ev.data.u64 = c.id;
    if (::epoll_ctl(epfd_, EPOLL_CTL_ADD, fd, &ev) != 0) {
        fail_locked(c, CmEventType::connect_error, errno, std::nullopt, "epoll registration failed");
        return;
    }
    if (connect_errno == ECONNREFUSED)
        reset_before_reply_locked(c, connect_errno, "TCP connect refused on a reconnect");
    else if (connect_errno != 0 && connect_errno != EINPROGRESS)
        fail_locked(c, CmEventType::unreachable, connect_errno, std::nullopt, "TCP connect failed");
}

void ConnectionManager::Loop::retire_locked(Connection& c, bool abortive)
{
    if (c.state != StartupState::closed && c.state != StartupState::established && c.fd >= 0) {
        if (c.state != StartupState::handing_off)
            ::epoll_ctl(epfd_, EPOLL_CTL_DEL, c.fd, nullptr);
        if (abortive)
            close_abortive(c.fd);
        else
            ::close(c.fd);
    }
    c.fd = -1;
    set_state_locked(c, StartupState::closed);
    connections_.erase(c.id);  // c is gone after this
}

void ConnectionManager::Loop::queue_event_locked(Connection& c, CmEvent event, std::vector<Action>* out)
{
    Action a;
    a.kind = Action::Kind::event;
    a.handler = c.handler;
    a.event = std::move(event);
    (out ? *out : actions_).push_back(std::move(a));
}

CmEvent ConnectionManager::Loop::make_event(const Connection& c, CmEventType type) const
{
    CmEvent ev;
    ev.type = type;
    ev.connection = c.id;
    ev.listener = c.listener;
    ev.local_address = c.local;
    ev.peer_address = c.peer;
    ev.mpa_revision = c.peer_revision;
    return ev;
}

ConnectionManager::Connection* ConnectionManager::Loop::find_locked(ConnectionId id)
{
    auto it = connections_.find(id);
    return it == connections_.end() ? nullptr : it->second.get();
}

// ---------------------------------------------------------------- API

int ConnectionManager::Loop::listen(const sockaddr* addr, socklen_t addr_len, int backlog,
                                    CmEventHandler handler, ListenerId* id, sockaddr_storage* bound)
{
    if (!handler || !id)
        return -EINVAL;
    sockaddr_storage where{};
    // The rdma_cm backlog counts requests handed to the ULP (the caller keeps
    // it); the kernel queue only holds handshakes until this loop accepts
    // them.  Kept deep: a tiny one (rping asks for 3) drops a burst of SYNs,
    // and clients then back off for seconds behind connections that will
    // never send a Request.
    const int tcp_backlog = std::max({backlog, static_cast<int>(half_open_cap()), accept_queue_min});
    const int fd = open_listener(addr, addr_len, tcp_backlog, &where);
    if (fd < 0)
        return fd;
    std::lock_guard lock(mu_);
    if (const int rc = ensure_running_locked(); rc != 0) {
        ::close(fd);
        return rc;
    }
    auto l = std::make_unique<Listener>();
    l->id = next_id_++;
    l->fd = fd;
    l->handler = std::move(handler);
    epoll_event ev{};
    ev.events = EPOLLIN;
    ev.data.u64 = l->id | listener_tag;
    if (::epoll_ctl(epfd_, EPOLL_CTL_ADD, fd, &ev) != 0) {
        const int err = errno;
        ::close(fd);
        return -err;
    }
    *id = l->id;
    if (bound)
        *bound = where;
    listeners_.emplace(l->id, std::move(l));
    return 0;
}

int ConnectionManager::Loop::stop_listening(ListenerId id)
{
    std::lock_guard lock(mu_);
    auto it = listeners_.find(id);
    if (it == listeners_.end())
        return -ENOENT;
    // Connections nobody has heard of yet go with the listener (before it:
    // they leave its half-open list).
    std::vector<ConnectionId> orphans;
    for (const auto& [cid, c] : connections_)
        if (c->listener == id && !c->visible)
            orphans.push_back(cid);
    for (ConnectionId cid : orphans)
        if (Connection* c = find_locked(cid))
            retire_locked(*c, true);
    ::epoll_ctl(epfd_, EPOLL_CTL_DEL, it->second->fd, nullptr);
    ::close(it->second->fd);
    listeners_.erase(it);
    wake();
    return 0;
}

int ConnectionManager::Loop::listener_stats(ListenerId id, ListenerStats* out)
{
    if (!out)
        return -EINVAL;
    std::lock_guard lock(mu_);
    auto it = listeners_.find(id);
    if (it == listeners_.end())
        return -ENOENT;
    out->half_open = it->second->half_open;
    out->evicted = it->second->evicted;
    return 0;
}

int ConnectionManager::Loop::accept(ConnectionId id, const AcceptArgs& args)
{
    std::lock_guard lock(mu_);
    Connection* c = find_locked(id);
    if (!c || c->destroyed)
        return -ENOENT;
    if (c->state != StartupState::awaiting_ulp || !args.endpoint.attach ||
        args.private_data.size() > (c->start_key ? 0 : max_sent_ulp_private_data(settings_, c->assessment.enhanced)))
        return -EINVAL;
    if (const int rc = ensure_running_locked(); rc != 0)
        return rc;
    if (c->start_key) {  // rule 2: the draft's "Active" side sends its key now
        if (!encode_start_key_locked(*c))
            return -EINVAL;
        c->params = start_key_params(settings_, c->our_key, c->peer_key, ConnectionRole::responder, args.ird, args.ord);
        send_answer_locked(*c, args, StartupState::answering_start_key);
        return 0;
    }
    AcceptPlan plan = plan_accept(settings_, c->assessment, args.ird, args.ord);
    plan.reply.private_data = args.private_data;
    if (!encode_frame_locked(*c, plan.reply))
        return -EINVAL;
    c->params = plan.params;
    send_answer_locked(*c, args, StartupState::sending_reply);
    return 0;
}

// The ULP's answer is encoded: it goes on the wire before rdma_accept
// returns, as with a kernel CM (see reject); the QP's hand-off is the CM
// thread's.  The MPA timeout covers writing it and, in seed-002 mode, the
// Rtr frame's arrival.
void ConnectionManager::Loop::send_answer_locked(Connection& c, const AcceptArgs& args, StartupState next)
{
    c.endpoint = args.endpoint;
    if (args.handler)
        c.handler = args.handler;
    set_state_locked(c, next);
    c.deadline = Clock::now() + settings_.mpa_timeout;
    send_locked(c);
    wake();
}

int ConnectionManager::Loop::reject(ConnectionId id, std::span<const uint8_t> private_data)
{
    std::lock_guard lock(mu_);
    Connection* c = find_locked(id);
    if (!c || c->destroyed)
        return -ENOENT;
    // A Start Key connection has nowhere to put a reject's private data:
    // dropped (logged), the reject itself goes through -- an rdma_reject
    // that failed would leave the request pending (and rdma_cm's id torn).
    if (c->state != StartupState::awaiting_ulp ||
        (!c->start_key && private_data.size() > max_sent_ulp_private_data(settings_, c->assessment.enhanced)))
        return -EINVAL;
    if (c->start_key && !private_data.empty())
        IWEMU_LOG(info, "cm: reject of a Start Key connection: %zu octets of private data dropped (draft-03 has none)",
                  private_data.size());
    if (const int rc = ensure_running_locked(); rc != 0)
        return rc;
    if (c->start_key) {  // §13.3: reject = close without a key
        c->visible = false;
        retire_locked(*c, false);
        wake();
        return 0;
    }
    wire::MpaFrame reply = make_reject(settings_, c->assessment);
    reply.private_data = private_data;
    if (!encode_frame_locked(*c, reply))
        return -EINVAL;
    c->visible = false;  // the id is retired for the ULP
    set_state_locked(*c, StartupState::sending_reject);
    c->deadline = Clock::now() + settings_.mpa_timeout;
    // On the wire before rdma_reject returns, as with a kernel CM: a process
    // may leave right after it without running exit handlers (_exit), and
    // the peer must still get the private data.  A full socket leaves the
    // rest to the CM thread.
    send_locked(*c);  // retires c once the Reply is out
    wake();
    return 0;
}

int ConnectionManager::Loop::connect(const ConnectArgs& args, ConnectionId* id)
{
    if (!id || !args.handler || !args.endpoint.attach)
        return -EINVAL;
    auto c = std::make_unique<Connection>();
    if (settings_.start_key) {
        // draft-03 carries Private Data outside MPA (§13.3), in a format
        // whose figure is lost: not offered (docs/interop.md).
        if (!args.private_data.empty())
            return -EINVAL;
        c->start_key = true;
        if (!encode_start_key_locked(*c))
            return -EINVAL;
    } else {
        c->request = make_request(settings_, args.ird, args.ord);
        if (args.private_data.size() > max_sent_ulp_private_data(settings_, c->request.enhanced.has_value()))
            return -EINVAL;
        c->request.private_data = args.private_data;
        if (!encode_frame_locked(*c, c->request))
            return -EINVAL;
        c->request.private_data = {};  // the caller's bytes are not ours to keep
    }

    int connect_errno = 0;
    const int fd = start_connect(args.remote, args.local, &connect_errno);
    if (fd < 0)
        return fd;

    std::lock_guard lock(mu_);
    if (const int rc = ensure_running_locked(); rc != 0) {
        ::close(fd);
        return rc;
    }
    c->id = next_id_++;
    c->active = true;
    c->visible = true;
    c->fd = fd;
    c->state = StartupState::tcp_connecting;
    c->deadline = Clock::now() + settings_.mpa_timeout;  // the whole exchange, rule 10
    c->handler = args.handler;
    c->endpoint = args.endpoint;
    c->ird = args.ird;
    c->ord = args.ord;
    c->peer = args.remote;
    c->remote = args.remote;
    c->bind_address = args.local;
    local_address(fd, &c->local);
    *id = c->id;
    Connection& ref = *c;
    connections_.emplace(c->id, std::move(c));

    epoll_event ev{};
    ev.events = EPOLLOUT;
    ev.data.u64 = ref.id;
    const bool watched = ::epoll_ctl(epfd_, EPOLL_CTL_ADD, fd, &ev) == 0;
    if (connect_errno != 0 && connect_errno != EINPROGRESS) {
        ::epoll_ctl(epfd_, EPOLL_CTL_DEL, fd, nullptr);
        fail_locked(ref, connect_errno == ECONNREFUSED ? CmEventType::connection_refused : CmEventType::unreachable,
                    connect_errno, std::nullopt, "TCP connect failed");
    } else if (!watched) {
        fail_locked(ref, CmEventType::connect_error, errno, std::nullopt, "epoll registration failed");
    }
    wake();
    return 0;
}

int ConnectionManager::Loop::disconnect(ConnectionId id, DisconnectMode mode)
{
    std::function<void(ConnectionId, DisconnectMode)> forward;
    {
        std::lock_guard lock(mu_);
        Connection* c = find_locked(id);
        if (!c || c->destroyed)
            return -ENOENT;
        if (cm_owns_socket(c->state)) {
            c->visible = false;
            retire_locked(*c, mode == DisconnectMode::abortive);
            wake();
            return 0;
        }
        if (c->state != StartupState::established)
            return -EBUSY;  // attach in progress: retry after `established`
        if (!c->endpoint.disconnect)
            return -ENOTSUP;
        forward = c->endpoint.disconnect;
    }
    forward(id, mode);  // no lock: the QP may call notify_disconnected() inside
    return 0;
}

void ConnectionManager::Loop::notify_disconnected(ConnectionId id, int error)
{
    std::lock_guard lock(mu_);
    Connection* c = find_locked(id);
    if (!c)
        return;
    if (c->state == StartupState::handing_off) {
        c->disconnect_pending = true;  // reported right after `established`
        c->disconnect_error = error;
        return;
    }
    if (c->state != StartupState::established || c->disconnect_reported)
        return;
    c->disconnect_reported = true;
    CmEvent ev = make_event(*c, CmEventType::disconnected);
    ev.error = error;
    queue_event_locked(*c, std::move(ev));
    if (ensure_running_locked() == 0)
        wake();
}

void ConnectionManager::Loop::destroy(ConnectionId id)
{
    std::lock_guard lock(mu_);
    Connection* c = find_locked(id);
    if (!c)
        return;
    if (c->state == StartupState::handing_off) {
        c->destroyed = true;  // finish_attach cleans up
        c->visible = false;
        return;
    }
    if (cm_owns_socket(c->state)) {
        c->visible = false;
        retire_locked(*c, true);
        wake();
        return;
    }
    connections_.erase(id);
}

bool ConnectionManager::Loop::flush_answers(Clock::time_point deadline)
{
    for (;;) {
        std::vector<pollfd> full;
        {
            // exit() may run on a thread that was interrupted holding mu_.
            std::unique_lock lock(mu_, std::defer_lock);
            while (!lock.try_lock()) {
                if (Clock::now() >= deadline)
                    return false;
                std::this_thread::sleep_for(std::chrono::milliseconds(1));
            }
            std::vector<ConnectionId> answering;
            for (const auto& [id, c] : connections_)
                if (c->state == StartupState::sending_reply || c->state == StartupState::sending_reject ||
                    c->state == StartupState::answering_start_key)
                    answering.push_back(id);
            for (ConnectionId id : answering) {
                Connection* c = find_locked(id);
                if (!c)
                    continue;
                send_locked(*c);  // a reject retires, a Reply's socket goes to the hand-off
                c = find_locked(id);
                if (c && (c->state == StartupState::sending_reply || c->state == StartupState::sending_reject ||
                          c->state == StartupState::answering_start_key))
                    full.push_back({c->fd, POLLOUT, 0});
            }
            if (!actions_.empty())
                wake();  // a hand-off for the CM thread
        }
        if (full.empty())
            return true;
        const auto left = std::chrono::ceil<std::chrono::milliseconds>(deadline - Clock::now()).count();
        if (left <= 0)
            return false;
        ::poll(full.data(), full.size(), static_cast<int>(left));
    }
}

// ---------------------------------------------------------------- facade

ConnectionManager::ConnectionManager(CmSettings settings)
    : settings_(std::move(settings)), loop_(std::make_unique<Loop>(settings_))
{
}

ConnectionManager::~ConnectionManager() = default;

int ConnectionManager::listen(const sockaddr* addr, socklen_t addr_len, int backlog,
                              CmEventHandler handler, ListenerId* id, sockaddr_storage* bound)
{
    return loop_->listen(addr, addr_len, backlog, std::move(handler), id, bound);
}

int ConnectionManager::stop_listening(ListenerId id) { return loop_->stop_listening(id); }

int ConnectionManager::accept(ConnectionId id, const AcceptArgs& args) { return loop_->accept(id, args); }

int ConnectionManager::reject(ConnectionId id, std::span<const uint8_t> private_data)
{
    return loop_->reject(id, private_data);
}

int ConnectionManager::connect(const ConnectArgs& args, ConnectionId* id) { return loop_->connect(args, id); }

int ConnectionManager::disconnect(ConnectionId id, DisconnectMode mode) { return loop_->disconnect(id, mode); }

void ConnectionManager::notify_disconnected(ConnectionId id, int error)
{
    loop_->notify_disconnected(id, error);
}

void ConnectionManager::destroy(ConnectionId id) { loop_->destroy(id); }

bool ConnectionManager::flush_answers(std::chrono::steady_clock::time_point deadline)
{
    return loop_->flush_answers(deadline);
}

int ConnectionManager::listener_stats(ListenerId id, ListenerStats* out) const
{
    return loop_->listener_stats(id, out);
}

}  // namespace iwemu::cm
