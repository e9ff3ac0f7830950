// Parent domains and thread domains (ibv_alloc_parent_domain(3), ibv_alloc_td(3)).
//
// A parent domain stands wherever its protection domain does (QPs, SRQs,
// MRs, an extended CQ's IBV_CQ_INIT_ATTR_MASK_PD): it carries the same
// emulator PD.  Its custom allocators exist so that a provider's
// device-visible queue buffers (rings, doorbell records) come from memory the
// application chose; iwemu has none -- its queues are the emulator's own
// objects, never mapped by the application or read by hardware -- so they
// are recorded and never called, as a provider that allocates no such
// buffer for an object does.  A thread domain is only a promise that its
// objects are used from one thread (a hint mlx5 uses to skip locks and give
// a private doorbell); iwemu takes note of nothing more.
#include <cstdlib>

#include "provider/abi_guard.h"
#include "provider/objects.h"

namespace iwemu::provider {

namespace {

struct Td {
    ibv_td ibv;
    uint32_t users;  // parent domains naming it (atomic ops)
};

ibv_pd* alloc_parent_domain(ibv_context* ctx, ibv_parent_domain_init_attr* attr)
{
    if (!attr || !attr->pd || attr->pd->context != ctx) return fail<ibv_pd>(EINVAL);
    if (attr->comp_mask & ~uint32_t{IBV_PARENT_DOMAIN_INIT_ATTR_ALLOCATORS | IBV_PARENT_DOMAIN_INIT_ATTR_PD_CONTEXT})
        return fail<ibv_pd>(EINVAL);
    Pd* base = to_pd(attr->pd);
    if (base->parent) return fail<ibv_pd>(EINVAL);  // a parent domain wraps a protection domain
    if (attr->td && attr->td->context != ctx) return fail<ibv_pd>(EINVAL);
    auto* pd = static_cast<Pd*>(calloc(1, sizeof(Pd)));
    if (!pd) return fail<ibv_pd>(ENOMEM);
    pd->ibv.context = ctx;
    pd->ibv.handle = base->ibv.handle;
    pd->emu = base->emu;
    pd->parent = base;
    pd->td = attr->td;
    if (attr->comp_mask & IBV_PARENT_DOMAIN_INIT_ATTR_ALLOCATORS) {
        pd->alloc = attr->alloc;
        pd->free_fn = attr->free;
    }
    if (attr->comp_mask & IBV_PARENT_DOMAIN_INIT_ATTR_PD_CONTEXT) pd->pd_context = attr->pd_context;
    __atomic_add_fetch(&base->parent_domains, 1, __ATOMIC_ACQ_REL);
    if (attr->td) __atomic_add_fetch(&reinterpret_cast<Td*>(attr->td)->users, 1, __ATOMIC_ACQ_REL);
    track(ctx, &ContextObjects::pds, pd);
    return &pd->ibv;
}

ibv_td* alloc_td(ibv_context* ctx, ibv_td_init_attr* attr)
{
    if (!attr || attr->comp_mask) return fail<ibv_td>(EINVAL);
    auto* td = static_cast<Td*>(calloc(1, sizeof(Td)));
    if (!td) return fail<ibv_td>(ENOMEM);
    td->ibv.context = ctx;
    return &td->ibv;
}

int dealloc_td(ibv_td* ibtd)
{
    Td* td = reinterpret_cast<Td*>(ibtd);
    if (__atomic_load_n(&td->users, __ATOMIC_ACQUIRE) != 0) return fail_status(EBUSY);  // a parent domain uses it
    free(td);
    return 0;
}

}  // namespace

int dealloc_parent_domain(Pd* pd)
{
    __atomic_sub_fetch(&pd->parent->parent_domains, 1, __ATOMIC_ACQ_REL);
    if (pd->td) __atomic_sub_fetch(&reinterpret_cast<Td*>(pd->td)->users, 1, __ATOMIC_ACQ_REL);
    untrack(pd->ibv.context, &ContextObjects::pds, pd);
    free(pd);
    return 0;
}

const verbs_context_ops kParentDomainOps = [] {
    verbs_context_ops ops{};
    ops.alloc_parent_domain = Guard<alloc_parent_domain>::call;
    ops.alloc_td = Guard<alloc_td>::call;
    ops.dealloc_td = Guard<dealloc_td>::call;
    return ops;
}();

}  // namespace iwemu::provider
