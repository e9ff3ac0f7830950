// Protection domains and memory regions on the emulator.
#include <cstdlib>

#include "provider/abi_guard.h"
#include "provider/objects.h"

namespace iwemu::provider {
namespace {

ibv_pd* alloc_pd(ibv_context* ctx)
{
    auto* pd = static_cast<Pd*>(calloc(1, sizeof(Pd)));
    if (!pd) return fail<ibv_pd>(ENOMEM);
    if (int err = emu().alloc_pd(&pd->emu)) {
        free(pd);
        return fail<ibv_pd>(err);
    }
    pd->emu->user_context = pd;
    pd->ibv.handle = pd->emu->handle();
    track(ctx, &ContextObjects::pds, pd);
    return &pd->ibv;
}

int dealloc_pd(ibv_pd* ibpd)
{
    Pd* pd = to_pd(ibpd);
    if (int err = emu().dealloc_pd(pd->emu)) return fail_status(err);
    untrack(ibpd->context, &ContextObjects::pds, pd);
    free(pd);
    return 0;
}

// ---- MR ------------------------------------------------------------------

ibv_mr* reg_mr(ibv_pd* ibpd, void* addr, size_t length, uint64_t hca_va, int access)
{
    auto* mr = static_cast<Mr*>(calloc(1, sizeof(Mr)));
    if (!mr) return fail<ibv_mr>(ENOMEM);
    // The kernel (ib_core) accepts REMOTE_ATOMIC on any device as long as
    // LOCAL_WRITE is set, and qperf always asks for it; with atomic_cap NONE
    // the right can never be exercised, so the emulator does not see it.
    uint32_t emu_access = static_cast<uint32_t>(access);
    if ((emu_access & access_remote_atomic) && (emu_access & access_local_write)) emu_access &= ~access_remote_atomic;
    if (int err = emu().reg_mr(to_pd(ibpd)->emu, addr, length, hca_va, emu_access, &mr->emu)) {
        free(mr);
        return fail<ibv_mr>(err);
    }
    mr->emu->user_context = mr;
    mr->vmr.mr_type = IBV_MR_TYPE_MR;
    mr->vmr.access = access;
    mr->vmr.ibv_mr.lkey = mr->emu->lkey();
    mr->vmr.ibv_mr.rkey = mr->emu->rkey();
    mr->vmr.ibv_mr.handle = mr->emu->stag();
    track(ibpd->context, &ContextObjects::mrs, mr);
    return &mr->vmr.ibv_mr;  // libibverbs fills context, pd, addr, length
}

int dereg_mr(verbs_mr* vmr)
{
    Mr* mr = reinterpret_cast<Mr*>(vmr);
    if (int err = emu().dereg_mr(mr->emu)) return fail_status(err);
    untrack(vmr->ibv_mr.context, &ContextObjects::mrs, mr);
    free(mr);
    return 0;
}

}  // namespace

const verbs_context_ops kPdMrOps = [] {
    verbs_context_ops ops{};
    ops.alloc_pd = Guard<alloc_pd>::call;
    ops.dealloc_pd = Guard<dealloc_pd>::call;
    ops.reg_mr = Guard<reg_mr>::call;
    ops.dereg_mr = Guard<dereg_mr>::call;
    return ops;
}();

}  // namespace iwemu::provider
