// Sharing verbs objects between contexts (rdma-core's shared PD):
// ibv_import_device on a copy of a context's cmd fd, ibv_import_pd and
// ibv_import_mr by the handle the owner's ibv_pd / ibv_mr carries, and
// their unimport.
//
// Ownership: the contexts on one uverbs file share its objects
// (ContextObjects, kept until the file's last context is closed).  An
// imported PD or MR is a view: a struct of the importing context naming the
// owner's emulator object, freed by ibv_unimport_* without touching that
// object.  ibv_dealloc_pd / ibv_dereg_mr through a view destroy the object
// for everyone, as the kernel's destroy of the shared uobject does; the
// owner and other views are then left naming none (EINVAL on later verbs).
// A handle the file does not know: NULL / ENOENT, the kernel's answer for
// an unknown object id.
#include <dlfcn.h>

#include <cstdlib>

#include "provider/abi_guard.h"
#include "provider/objects.h"

namespace iwemu::provider {

namespace {

ibv_pd* import_pd(ibv_context* ctx, uint32_t pd_handle)
{
    ContextObjects* objs = to_context(ctx)->objects;
    auto* view = static_cast<Pd*>(calloc(1, sizeof(Pd)));
    if (!view) return fail<ibv_pd>(ENOMEM);
    std::lock_guard lock(objs->lock);
    for (Pd* owner : objs->pds) {
        if (owner->parent || !owner->emu || owner->ibv.handle != pd_handle) continue;
        view->emu = owner->emu;
        view->imported = true;
        view->ibv.context = ctx;
        view->ibv.handle = pd_handle;
        objs->imported_pds.insert(view);
        return &view->ibv;
    }
    free(view);
    return fail<ibv_pd>(ENOENT);
}

void unimport_pd(ibv_pd* ibpd)
{
    Pd* pd = to_pd(ibpd);
    if (!pd->imported) return;  // not a view: nothing was imported
    // A parent domain still wraps the view: it stays (unused) until the
    // file's last context closes, so that parent domain's later dealloc
    // finds it.
    if (__atomic_load_n(&pd->parent_domains, __ATOMIC_ACQUIRE) != 0) return;
    {
        ContextObjects* objs = to_context(ibpd->context)->objects;
        std::lock_guard lock(objs->lock);
        objs->imported_pds.erase(pd);
    }
    free(pd);
}

ibv_mr* import_mr(ibv_pd* ibpd, uint32_t mr_handle)
{
    ContextObjects* objs = to_context(ibpd->context)->objects;
    auto* view = static_cast<Mr*>(calloc(1, sizeof(Mr)));
    if (!view) return fail<ibv_mr>(ENOMEM);
    std::lock_guard lock(objs->lock);
    for (Mr* owner : objs->mrs) {
        if (!owner->emu || owner->vmr.ibv_mr.handle != mr_handle) continue;
        view->emu = owner->emu;
        view->vmr.mr_type = IBV_MR_TYPE_IMPORTED_MR;
        view->vmr.access = owner->vmr.access;
        ibv_mr& m = view->vmr.ibv_mr;
        m.context = ibpd->context;
        m.pd = ibpd;
        m.addr = nullptr;  // the kernel's QUERY_MR reports keys and length only
        m.length = static_cast<size_t>(owner->emu->length());
        m.handle = mr_handle;
        m.lkey = owner->emu->lkey();
        m.rkey = owner->emu->rkey();
        objs->imported_mrs.insert(view);
        return &m;
    }
    free(view);
    return fail<ibv_mr>(ENOENT);
}

void unimport_mr(ibv_mr* ibmr)
{
    auto* mr = reinterpret_cast<Mr*>(ibmr);
    if (mr->vmr.mr_type != IBV_MR_TYPE_IMPORTED_MR) return;
    {
        ContextObjects* objs = to_context(ibmr->context)->objects;
        std::lock_guard lock(objs->lock);
        objs->imported_mrs.erase(mr);
    }
    free(mr);
}

}  // namespace

verbs_context* import_context(ibv_device* ibdev, int cmd_fd)
{
    auto* ctx = static_cast<Context*>(_verbs_init_and_alloc_context(
        ibdev, cmd_fd, sizeof(Context), reinterpret_cast<verbs_context*>(offsetof(Context, vctx)), kIwemuDriverId));
    if (!ctx) return nullptr;
    int reader = -1;
    if (int err = setup_context(ctx, uverbs_file_of(cmd_fd), &reader)) return fail<verbs_context>(err);
    // libibverbs asks the "kernel" for the imported context's async event
    // file (ASYNC_EVENT/ALLOC on cmd_fd) and stores the fd it returns: the
    // shim returns this one.  Without the offer that ioctl fails and
    // libibverbs closes the context again (async_fd is closed then).
    ctx->vctx.context.async_fd = reader;
    using OfferFn = int (*)(int, int);
    static auto offer = reinterpret_cast<OfferFn>(dlsym(RTLD_DEFAULT, "iwemu_shim_uverbs_offer_async_fd"));
    if (offer) offer(cmd_fd, reader);
    return &ctx->vctx;
}

void forget_shared_pd(ibv_context* ctx, ProtectionDomain* emu, Pd* self)
{
    ContextObjects* objs = to_context(ctx)->objects;
    std::lock_guard lock(objs->lock);
    if (objs->imported_pds.empty()) return;  // nothing shares it
    for (Pd* pd : objs->imported_pds)
        if (pd != self && pd->emu == emu) pd->emu = nullptr;
    for (Pd* pd : objs->pds)
        if (pd != self && pd->emu == emu) pd->emu = nullptr;
}

void forget_shared_mr(ibv_context* ctx, MemoryRegion* emu, Mr* self)
{
    ContextObjects* objs = to_context(ctx)->objects;
    std::lock_guard lock(objs->lock);
    if (objs->imported_mrs.empty()) return;
    for (Mr* mr : objs->imported_mrs)
        if (mr != self && mr->emu == emu) mr->emu = nullptr;
    for (Mr* mr : objs->mrs)
        if (mr != self && mr->emu == emu) mr->emu = nullptr;
}

int dealloc_imported_pd(Pd* pd)
{
    ProtectionDomain* shared = pd->emu;
    ibv_context* ctx = pd->ibv.context;
    {
        ContextObjects* objs = to_context(ctx)->objects;
        std::lock_guard lock(objs->lock);
        // Parent domains on the owner or on any view hold it, as dealloc_pd checks.
        auto wrapped = [shared](const Pd* p) {
            return p->emu == shared && !p->parent && __atomic_load_n(&p->parent_domains, __ATOMIC_ACQUIRE) != 0;
        };
        for (Pd* owner : objs->pds)
            if (wrapped(owner)) return fail_status(EBUSY);
        for (Pd* view : objs->imported_pds)
            if (wrapped(view)) return fail_status(EBUSY);
    }
    if (int err = emu().dealloc_pd(shared)) return fail_status(err);  // EINVAL once destroyed elsewhere
    forget_shared_pd(ctx, shared, pd);
    unimport_pd(&pd->ibv);
    return 0;
}

int dereg_imported_mr(Mr* mr)
{
    MemoryRegion* shared = mr->emu;
    ibv_context* ctx = mr->vmr.ibv_mr.context;
    if (int err = emu().dereg_mr(shared)) return fail_status(err);
    forget_shared_mr(ctx, shared, mr);
    unimport_mr(&mr->vmr.ibv_mr);
    return 0;
}

const verbs_context_ops kImportOps = [] {
    verbs_context_ops ops{};
    ops.import_pd = Guard<import_pd>::call;
    ops.unimport_pd = Guard<unimport_pd>::call;
    ops.import_mr = Guard<import_mr>::call;
    ops.unimport_mr = Guard<unimport_mr>::call;
    return ops;
}();

}  // namespace iwemu::provider
