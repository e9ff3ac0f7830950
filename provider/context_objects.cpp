// Contexts as the provider tracks them: async event routing (a context
// receives the events of the objects it created, and every port/device
// event) and the objects of its uverbs file, destroyed when the last
// context on that file is closed (ibv_import_device shares a file).
#include <pthread.h>

#include <algorithm>
#include <cstdlib>
#include <memory>
#include <unordered_map>
#include <vector>

#include "provider/objects.h"

namespace iwemu::provider {

std::mutex& routing_lock()
{
    static auto* lock = new std::mutex;  // used from emulator threads until exit
    return *lock;
}

namespace {

std::vector<Context*>& contexts()
{
    static auto* list = new std::vector<Context*>;
    return *list;
}

// The objects of each uverbs file that has open contexts, by file number
// (under routing_lock).
std::unordered_map<uint64_t, ContextObjects*>& files()
{
    static auto* map = new std::unordered_map<uint64_t, ContextObjects*>;
    return *map;
}

ibv_context* owner_of(const AsyncEvent& ev)
{
    if (ev.qp && ev.qp->user_context) return static_cast<Qp*>(ev.qp->user_context)->vqp.qp.context;
    if (ev.cq && ev.cq->user_context) return static_cast<Cq*>(ev.cq->user_context)->ibv.context;
    if (ev.srq && ev.srq->user_context) return static_cast<Srq*>(ev.srq->user_context)->ibv.context;
    return nullptr;
}

void on_async_event(const AsyncEvent& ev)
{
    const auto type = static_cast<ibv_event_type>(ev.type);
    std::lock_guard lock(routing_lock());
    ibv_context* owner = owner_of(ev);
    // Objects go before their context; still, never write an event to the
    // async fd of a context that is closed.
    if (owner && std::find(contexts().begin(), contexts().end(), to_context(owner)) == contexts().end()) return;
    if (owner) {
        uint64_t element = ev.qp   ? reinterpret_cast<uintptr_t>(&static_cast<Qp*>(ev.qp->user_context)->vqp.qp)
                           : ev.cq ? reinterpret_cast<uintptr_t>(&static_cast<Cq*>(ev.cq->user_context)->ibv)
                                   : reinterpret_cast<uintptr_t>(&static_cast<Srq*>(ev.srq->user_context)->ibv);
        post_async_event(to_context(owner), element, type);
        return;
    }
    if (ev.qp || ev.cq || ev.srq) return;  // object not (or no longer) exposed
    for (Context* ctx : contexts()) post_async_event(ctx, ev.port_num, type);  // port / device events
}

}  // namespace

void register_context(Context* ctx, uint64_t file)
{
    static std::once_flag once;
    std::call_once(once, [] { emu().set_async_event_handler(on_async_event); });
    std::unique_ptr<ContextObjects> fresh(new ContextObjects);
    fresh->file = file;
    std::lock_guard lock(routing_lock());
    ContextObjects* shared = nullptr;
    if (file != 0) {
        auto [it, inserted] = files().try_emplace(file, fresh.get());
        if (!inserted) shared = it->second;
    }
    if (shared) {
        ++shared->contexts;
        ctx->objects = shared;
    } else {
        ctx->objects = fresh.release();
    }
    contexts().push_back(ctx);
}

void unregister_context(Context* ctx)
{
    ContextObjects* objs = nullptr;
    {
        std::lock_guard lock(routing_lock());
        auto& list = contexts();
        list.erase(std::remove(list.begin(), list.end(), ctx), list.end());
        objs = ctx->objects;
        ctx->objects = nullptr;
        // Another context on the same file keeps what was created on it.
        if (objs && --objs->contexts > 0) return;
        if (objs && objs->file != 0) files().erase(objs->file);
    }
    if (!objs) return;
    for (Pd* pd : objs->imported_pds) free(pd);  // views: no emulator object of their own
    for (Mr* mr : objs->imported_mrs) free(mr);
    // What the application left behind goes as it would with the kernel's
    // uverbs file: QPs first (their connections are aborted), then what
    // they used.  The ibv_* handles the application may still hold die here.
    for (Qp* qp : objs->qps) {
        detach_and_destroy(qp->emu, qp, [](QueuePair* q) { return emu().destroy_qp(q); });
        pthread_cond_destroy(&qp->vqp.qp.cond);
        pthread_mutex_destroy(&qp->vqp.qp.mutex);
        free_qp_ex(qp);
        free(qp);
    }
    for (Srq* srq : objs->srqs) {
        detach_and_destroy(srq->emu, srq, [](SharedReceiveQueue* q) { return emu().destroy_srq(q); });
        free(srq);
    }
    for (Cq* cq : objs->cqs) {
        detach_and_destroy(cq->emu, cq, [](CompletionQueue* c) { return emu().destroy_cq(c); });
        cq->~Cq();
        free(cq);
    }
    for (Mw* mw : objs->mws) {  // before the MRs they may be bound to
        emu().dealloc_mw(mw->emu);
        free(mw);
    }
    for (Mr* mr : objs->mrs) {
        emu().dereg_mr(mr->emu);
        free(mr);
    }
    for (Pd* pd : objs->pds)  // a parent domain shares its protection domain's emulator PD
        if (!pd->parent) emu().dealloc_pd(pd->emu);
    for (Pd* pd : objs->pds) free(pd);
    delete objs;
}

}  // namespace iwemu::provider
