#include "kmod-shim/ucma_cm_link.h"

#include <pthread.h>
#include <signal.h>

#include <algorithm>
#include <functional>
#include <thread>
#include <atomic>
#include <mutex>
#include <new>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string_view>

#include "emulator/emulator.h"
#include "emulator/qp/qp.h"
#include "kmod-shim/ucma_abi.h"
#include "kmod-shim/ucma_address.h"
#include "kmod-shim/ucma_events.h"
#include "kmod-shim/ucma_ids.h"

namespace iwemu::shim {

namespace {

cm::CmSettings settings_from(const Emulator& emu) {
    const Config& cfg = emu.config();
    cm::CmSettings s;
    s.mpa_revision = cfg.mpa_revision;
    s.accept_rev0 = cfg.mpa_rev0_accept;
    s.start_key = cfg.mpa_start_key;
    s.crc = cfg.crc;
    s.markers = cfg.markers;
    s.peer_to_peer = cfg.seed_rtr_frame ? cm::PeerToPeerMode::seed002
                     : cfg.peer_to_peer ? cm::PeerToPeerMode::rfc6581
                                        : cm::PeerToPeerMode::off;
    s.rtr = cm::rtr_types_from_list(cfg.rtr_types);
    s.mpa_timeout = std::chrono::milliseconds(cfg.mpa_timeout_ms);
    s.connect_retries = cfg.connect_retries;
    s.max_half_open_per_listener = cfg.max_half_open;
    s.max_ird = static_cast<uint16_t>(std::min<uint32_t>(emu.device_attributes().max_qp_rd_atom, 0xFFFF));
    s.max_ord = static_cast<uint16_t>(std::min<uint32_t>(emu.device_attributes().max_qp_init_rd_atom, 0xFFFF));
    return s;
}

std::mutex cm_create_lock;
std::atomic<cm::ConnectionManager*> cm_current{nullptr};
bool exit_flush_registered = false;  // under cm_create_lock; a forked child inherits the handler

// How long exit() waits for the answers the CM thread has not sent yet.
constexpr auto exit_flush_limit = std::chrono::milliseconds(200);

// rdma_accept / rdma_reject return before the CM thread writes their MPA
// Reply; the kernel's CM would have sent it already.  Runs before the
// emulator's own exit teardown (registered later, so called first).
void flush_answers_at_exit() {
    if (cm::ConnectionManager* cm = cm_current.load(std::memory_order_acquire))
        cm->flush_answers(std::chrono::steady_clock::now() + exit_flush_limit);
}

cm::ConnectionManager& cm_instance() {
    cm::ConnectionManager* cm = cm_current.load(std::memory_order_acquire);
    if (cm) return *cm;
    std::lock_guard lock(cm_create_lock);
    cm = cm_current.load(std::memory_order_relaxed);
    if (!cm) {
        // Leaked on purpose (see ucma_cm_link.h).
        cm = new cm::ConnectionManager(settings_from(Emulator::instance()));
        cm_current.store(cm, std::memory_order_release);
        if (!exit_flush_registered) exit_flush_registered = std::atexit(flush_answers_at_exit) == 0;
    }
    return *cm;
}

uint8_t clamp_rd(uint16_t v) {
    if (v == cm::ird_ord_not_negotiated) return ucma_device_max_rd_atom();
    return static_cast<uint8_t>(std::min<uint16_t>(v, 255));
}

void copy_private_data(const std::vector<uint8_t>& from, rdma_ucm_conn_param* to) {
    size_t n = std::min<size_t>(from.size(), RDMA_MAX_PRIVATE_DATA - 1);  // u8 length field
    if (n) std::memcpy(to->private_data, from.data(), n);  // data() of an empty vector may be null
    to->private_data_len = static_cast<uint8_t>(n);
}

// The event an active id's connection attempt ends with (cma_iw_handler's
// CONNECT_REPLY switch, with the CM's finer failure kinds).
struct Outcome {
    uint32_t event;
    int32_t status;
};
Outcome failure_outcome(const cm::CmEvent& ev) {
    switch (ev.type) {
    case cm::CmEventType::rejected: return {RDMA_CM_EVENT_REJECTED, -ECONNREFUSED};
    case cm::CmEventType::connection_refused: return {RDMA_CM_EVENT_REJECTED, -ECONNREFUSED};
    case cm::CmEventType::unreachable:
        return {RDMA_CM_EVENT_UNREACHABLE, -(ev.error ? ev.error : EHOSTUNREACH)};
    case cm::CmEventType::timeout: return {RDMA_CM_EVENT_UNREACHABLE, -ETIMEDOUT};
    default:
        if (ev.error == ECONNRESET || ev.error == ECONNREFUSED)
            return {RDMA_CM_EVENT_REJECTED, -ev.error};
        return {RDMA_CM_EVENT_CONNECT_ERROR, -(ev.error ? ev.error : EPROTO)};
    }
}

// A connect_request on listener `listener`: a new child id, and the
// CONNECT_REQUEST event on the listener's file.  Returns false when the
// request must be refused (listener gone or backlog full).  ucma_lock() held.
bool on_connect_request(UcmaId& listener, const cm::CmEvent& ev) {
    if (listener.state != CmIdState::listen || listener.file->closed) return false;
    if (listener.backlog_used >= listener.backlog) return false;
    UcmaId* child = ucma_id_create(listener.file);
    child->ps = listener.ps;
    child->qp_type = listener.qp_type;
    child->state = CmIdState::connect;
    child->is_child = true;
    child->listener_handle = listener.handle;
    child->src = ev.local_address;
    child->dst = ev.peer_address;
    child->device_bound = true;
    child->has_iw_cm_id = true;
    child->cm_connection = ev.connection;
    ucma_conn_bind(ev.connection, child->handle);
    ++listener.backlog_used;

    UcmaEvent out;
    out.handle = listener.handle;
    out.child = child->handle;
    out.event = RDMA_CM_EVENT_CONNECT_REQUEST;
    copy_private_data(ev.private_data, &out.conn);
    // iw_conn_req_handler: the peer's IRD bounds our reads, its ORD our responder resources.
    out.conn.initiator_depth = clamp_rd(ev.ird);
    out.conn.responder_resources = clamp_rd(ev.ord);
    out.conn.valid = 1;
    listener.file->push(out);
    return true;
}

bool retry_refused_locked(UcmaId& id, const cm::CmEvent& ev);  // below

// Later events of one connection, for the id that owns it.  ucma_lock() held.
// Returns the connection the CM may forget now (its last event is out: the
// id lets go of it, so its DESTROY_ID will not), or 0.
cm::ConnectionId on_connection_event(UcmaId& id, const cm::CmEvent& ev) {
    UcmaEvent out;
    out.handle = id.handle;
    switch (ev.type) {
    case cm::CmEventType::established:
        out.event = RDMA_CM_EVENT_ESTABLISHED;
        if (!id.is_child) copy_private_data(ev.private_data, &out.conn);
        out.conn.initiator_depth = clamp_rd(ev.ird);
        out.conn.responder_resources = clamp_rd(ev.ord);
        break;
    case cm::CmEventType::disconnected:
        out.event = RDMA_CM_EVENT_DISCONNECTED;
        break;
    case cm::CmEventType::connect_request:
        return 0;  // only listeners get these
    default: {
        Outcome o = failure_outcome(ev);
        out.event = o.event;
        out.status = o.status;
        if (ev.type == cm::CmEventType::rejected) copy_private_data(ev.private_data, &out.conn);
        break;
    }
    }
    bool terminal = ev.type != cm::CmEventType::established;
    if (terminal && retry_refused_locked(id, ev)) return 0;
    cm::ConnectionId done = 0;
    if (terminal) {
        id.connect_attempt.reset();
        ucma_conn_unbind(id.cm_connection);
        done = id.cm_connection;
        id.cm_connection = 0;
        if (id.state == CmIdState::connect) ucma_id_set_state(id, CmIdState::disconnect);
    }
    // A child the application never accepted has no uid: the kernel drops
    // its events (the CONNECT_REQUEST itself still goes out).
    if (id.uid != 0) id.file->push(out);
    return done;
}

}  // namespace

void ucma_cm_forget_after_fork() {
    // The parent's CM (and its thread, absent here) is left alone: its
    // sockets are the parent's connections.  The lock may have been held by
    // a parent thread at fork time.
    new (&cm_create_lock) std::mutex;
    cm_current.store(nullptr, std::memory_order_release);
}

namespace {

constexpr int max_refused_retries = 6;  // 5+10+20+40+80+160 ms at most
constexpr auto refused_retry_window = std::chrono::milliseconds(500);

// Runs fn after delay on a short-lived thread that blocks every signal (the
// application's SIGALRM must reach its own threads).
void run_later(std::chrono::milliseconds delay, std::function<void()> fn) {
    sigset_t all, old;
    sigfillset(&all);
    pthread_sigmask(SIG_SETMASK, &all, &old);
    std::thread([delay, fn = std::move(fn)] {
        std::this_thread::sleep_for(delay);
        fn();
    }).detach();
    pthread_sigmask(SIG_SETMASK, &old, nullptr);
}

// A refused TCP connect of an active id: try again shortly (see
// ucma_start_connect) or give up.  ucma_lock() held; true if retrying.
bool retry_refused_locked(UcmaId& id, const cm::CmEvent& ev) {
    if (ev.type != cm::CmEventType::connection_refused || id.is_child || !id.connect_attempt) return false;
    std::shared_ptr<ConnectAttempt> attempt = id.connect_attempt;
    if (attempt->refused >= max_refused_retries ||
        std::chrono::steady_clock::now() - attempt->started > refused_retry_window)
        return false;
    auto delay = std::chrono::milliseconds(5 << attempt->refused);
    ++attempt->refused;
    // The refusal may overtake ucma_start_connect storing this connection
    // id: `ended` keeps it from storing a connection that is already over.
    attempt->ended = ev.connection;
    ucma_conn_unbind(id.cm_connection);
    id.cm_connection = 0;
    uint32_t handle = id.handle;
    run_later(delay, [handle, attempt] {
        if (int rc = ucma_start_connect(handle, attempt); rc < 0) {
            std::lock_guard lock(ucma_lock());
            UcmaId* id = ucma_id_find(handle);
            if (!id || id->state != CmIdState::connect || id->connect_attempt != attempt) return;
            ucma_id_set_state(*id, CmIdState::disconnect);
            id->connect_attempt.reset();
            UcmaEvent out;
            out.handle = handle;
            out.event = RDMA_CM_EVENT_REJECTED;
            out.status = -ECONNREFUSED;
            if (id->uid) id->file->push(out);
        }
    });
    return true;
}

}  // namespace

int ucma_start_connect(uint32_t handle, const std::shared_ptr<ConnectAttempt>& attempt) {
    {
        std::lock_guard lock(ucma_lock());
        UcmaId* id = ucma_id_find(handle);
        // Destroyed, disconnected or connected again meanwhile: nothing to do.
        if (!id || id->state != CmIdState::connect || id->cm_connection ||
            id->connect_attempt != attempt)
            return 0;
    }
    cm::ConnectArgs args = attempt->args;
    args.handler = [handle](const cm::CmEvent& ev) { ucma_on_cm_event(handle, ev); };
    cm::ConnectionId conn = 0;
    int rc = cm_instance().connect(args, &conn);
    if (rc < 0) return rc;
    std::unique_lock lock(ucma_lock());
    UcmaId* id = ucma_id_find(handle);
    if (id && id->state != CmIdState::destroying && id->connect_attempt == attempt) {
        if (!id->cm_connection && id->state == CmIdState::connect && attempt->ended != conn) {
            id->cm_connection = conn;
            ucma_conn_bind(conn, handle);
        }
        return 0;
    }
    lock.unlock();
    cm_instance().destroy(conn);  // the id went away while we were connecting
    return 0;
}

uint8_t ucma_device_max_rd_atom() {
    uint32_t v = Emulator::instance().device_attributes().max_qp_rd_atom;
    return static_cast<uint8_t>(std::clamp<uint32_t>(v, 1, 255));
}

int ucma_cm_listen(const sockaddr_storage& addr, int backlog, cm::CmEventHandler handler,
                   cm::ListenerId* id, sockaddr_storage* bound) {
    return cm_instance().listen(reinterpret_cast<const sockaddr*>(&addr), sockaddr_size(addr.ss_family),
                                backlog, std::move(handler), id, bound);
}

int ucma_cm_stop_listening(cm::ListenerId id) { return cm_instance().stop_listening(id); }

int ucma_cm_connect(const cm::ConnectArgs& args, cm::ConnectionId* id) {
    return cm_instance().connect(args, id);
}

int ucma_cm_accept(cm::ConnectionId id, const cm::AcceptArgs& args) {
    return cm_instance().accept(id, args);
}

int ucma_cm_reject(cm::ConnectionId id, std::span<const uint8_t> private_data) {
    return cm_instance().reject(id, private_data);
}

int ucma_cm_disconnect(cm::ConnectionId id, cm::DisconnectMode mode) {
    return cm_instance().disconnect(id, mode);
}

void ucma_cm_destroy(cm::ConnectionId id) { cm_instance().destroy(id); }

int ucma_qp_endpoint(uint32_t qp_num, cm::Endpoint* endpoint, std::optional<uint8_t> ack_timeout) {
    std::shared_ptr<QueuePair> qp = Emulator::instance().find_qp(qp_num);
    if (!qp) return -EINVAL;  // as iw_cm_connect / iw_cm_accept for an unknown QP
    if (ack_timeout) {
        QpAttr a;
        a.timeout = *ack_timeout;
        qp->modify(a, qp_attr_timeout);
    }
    std::weak_ptr<QueuePair> weak = qp;
    endpoint->attach = [weak](cm::ConnectionId conn, const ConnectionParams& params) -> int {
        std::shared_ptr<QueuePair> qp = weak.lock();
        if (!qp) return -EINVAL;  // destroyed during startup
        // The QP reports the end of the stream; the CM turns it into the
        // one `disconnected` event (rdma_cm DISCONNECTED).
        qp->set_connection_event_handler([conn](QpConnectionEvent ev) {
            switch (ev) {
            case QpConnectionEvent::established: return;
            case QpConnectionEvent::peer_closed: cm_instance().notify_disconnected(conn, 0); return;
            case QpConnectionEvent::terminated:
                cm_instance().notify_disconnected(conn, ECONNABORTED);
                return;
            case QpConnectionEvent::connection_error:
                cm_instance().notify_disconnected(conn, ECONNRESET);
                return;
            }
        });
        return qp->attach_connection(params);
    };
    endpoint->disconnect = [weak](cm::ConnectionId, cm::DisconnectMode mode) {
        if (std::shared_ptr<QueuePair> qp = weak.lock()) {
            if (mode == cm::DisconnectMode::graceful)
                qp->disconnect();
            else
                qp->abort();
        }
    };
    return 0;
}

void ucma_on_cm_event(uint32_t handle, const cm::CmEvent& ev) {
    bool refuse = false;
    cm::ConnectionId done = 0;
    {
        std::lock_guard lock(ucma_lock());
        UcmaId* id = ucma_id_find(handle);
        if (id && id->state != CmIdState::destroying) {
            if (ev.type == cm::CmEventType::connect_request) {
                refuse = !on_connect_request(*id, ev);
            } else {
                // A listener's handler also carries its children's events
                // until ACCEPT installs the child's own handler.
                UcmaId* target = id;
                if (id->state == CmIdState::listen || id->cm_listener) {
                    uint32_t child = ucma_conn_find(ev.connection);
                    target = child == no_handle ? nullptr : ucma_id_find(child);
                }
                if (target && target->cm_connection == ev.connection)
                    done = on_connection_event(*target, ev);
                else if (target && !target->cm_connection && target->state == CmIdState::connect &&
                         !target->is_child) {
                    // Active id whose CONNECT has not stored the connection id yet.
                    target->cm_connection = ev.connection;
                    ucma_conn_bind(ev.connection, target->handle);
                    done = on_connection_event(*target, ev);
                }
            }
        } else if (ev.type == cm::CmEventType::connect_request) {
            refuse = true;
        }
    }
    if (refuse) {
        // Backlog full or listener gone: the peer sees an MPA reject
        // (the kernel's iw_cm rejects such requests too).
        cm_instance().reject(ev.connection, {});
    }
    // The connection's record (and the QP endpoint it holds) goes now:
    // nothing names it any more, and it kept a destroyed QP's memory.
    if (done) cm_instance().destroy(done);
}

}  // namespace iwemu::shim
