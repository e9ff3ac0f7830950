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
    if (pd->parent) return dealloc_parent_domain(pd);
    if (pd->imported) return dealloc_imported_pd(pd);
    if (__atomic_load_n(&pd->parent_domains, __ATOMIC_ACQUIRE) != 0) return fail_status(EBUSY);
    ProtectionDomain* gone = pd->emu;
    if (int err = emu().dealloc_pd(gone)) return fail_status(err);  // EINVAL: destroyed through an import
    forget_shared_pd(ibpd->context, gone, pd);
    untrack(ibpd->context, &ContextObjects::pds, pd);
    free(pd);
    return 0;
}

// ---- MR ------------------------------------------------------------------

uint32_t emulator_access(int access)
{
    // ibv_access_flags and the emulator's access bits are the same values;
    // REMOTE_ATOMIC reaches the region (RFC 7306 atomics check it).
    return static_cast<uint32_t>(access);
}

ibv_mr* reg_mr(ibv_pd* ibpd, void* addr, size_t length, uint64_t hca_va, int access)
{
    auto* mr = static_cast<Mr*>(calloc(1, sizeof(Mr)));
    if (!mr) return fail<ibv_mr>(ENOMEM);
    if (int err = emu().reg_mr(to_pd(ibpd)->emu, addr, length, hca_va, emulator_access(access), &mr->emu)) {
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
    if (vmr->mr_type == IBV_MR_TYPE_IMPORTED_MR) return dereg_imported_mr(mr);
    MemoryRegion* gone = mr->emu;
    if (int err = emu().dereg_mr(gone)) return fail_status(err);  // EINVAL: destroyed through an import
    forget_shared_mr(vmr->ibv_mr.context, gone, mr);
    untrack(vmr->ibv_mr.context, &ContextObjects::mrs, mr);
    free(mr);
    return 0;
}

// libibverbs has checked the flags and updates ibv_mr's pd, addr and length
// on success; the access it leaves to the provider.  Keys stay as they are
// (the kernel's rereg keeps them unless asked otherwise).
int rereg_mr(verbs_mr* vmr, int flags, ibv_pd* ibpd, void* addr, size_t length, int access)
{
    Mr* mr = reinterpret_cast<Mr*>(vmr);
    MemoryRegion* cur = mr->emu;
    ProtectionDomain* pd = cur->pd();
    void* host = cur->addr();
    uint64_t len = cur->length();
    uint64_t iova = cur->iova();
    int new_access = vmr->access;
    if (flags & IBV_REREG_MR_CHANGE_PD) {
        if (!ibpd || ibpd->context != vmr->ibv_mr.context) return fail_status(EINVAL);
        pd = to_pd(ibpd)->emu;
    }
    if (flags & IBV_REREG_MR_CHANGE_TRANSLATION) {
        host = addr;
        len = length;
        iova = reinterpret_cast<uintptr_t>(addr);  // as ibv_reg_mr: the virtual address
    }
    if (flags & IBV_REREG_MR_CHANGE_ACCESS) new_access = access;
    if (int err = emu().rereg_mr(cur, pd, host, len, iova, emulator_access(new_access))) return fail_status(err);
    vmr->access = new_access;
    return 0;
}

}  // namespace

const verbs_context_ops kPdMrOps = [] {
    verbs_context_ops ops{};
    ops.alloc_pd = Guard<alloc_pd>::call;
    ops.dealloc_pd = Guard<dealloc_pd>::call;
    ops.reg_mr = Guard<reg_mr>::call;
    ops.dereg_mr = Guard<dereg_mr>::call;
    ops.rereg_mr = Guard<rereg_mr>::call;
    return ops;
}();

}  // namespace iwemu::provider
