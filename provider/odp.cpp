// On-demand paging: ibv_advise_mr(3).  Registration itself needs nothing
// special (reg_mr passes IBV_ACCESS_ON_DEMAND to the emulator, which pins
// nothing in any case and touches an ODP region's memory only fault-safely,
// emulator/odp_memory.h); the capabilities are in query.cpp.
#include "emulator/odp_memory.h"
#include "provider/abi_guard.h"
#include "provider/objects.h"

namespace iwemu::provider {

namespace {

// As the kernel's ODP providers (mlx5, rxe): every SGE must name an ODP
// region of this PD by its lkey (ENOENT otherwise, EINVAL for a region
// without ON_DEMAND), with local write for PREFETCH_WRITE.  A synchronous
// prefetch (FLUSH) reports a range that cannot be faulted in (EFAULT); an
// asynchronous one runs the same way but drops that error, as the kernel's
// deferred work does.  PREFETCH_NO_FAULT maps nothing new: validation only.
int advise_mr(ibv_pd* ibpd, ibv_advise_mr_advice advice, uint32_t flags, ibv_sge* sg_list, uint32_t num_sge)
{
    if (advice != IBV_ADVISE_MR_ADVICE_PREFETCH && advice != IBV_ADVISE_MR_ADVICE_PREFETCH_WRITE &&
        advice != IBV_ADVISE_MR_ADVICE_PREFETCH_NO_FAULT)
        return EOPNOTSUPP;
    if (flags & ~uint32_t{IBV_ADVISE_MR_FLAG_FLUSH}) return EINVAL;
    if (num_sge == 0 || !sg_list) return EINVAL;
    const bool write = advice == IBV_ADVISE_MR_ADVICE_PREFETCH_WRITE;
    ProtectionDomain* pd = to_pd(ibpd)->emu;
    for (uint32_t i = 0; i < num_sge; ++i) {
        StagError e;
        MemoryRegion* mr = emu().stags().acquire(sg_list[i].lkey, pd, write ? access_local_write : 0, sg_list[i].addr,
                                                 sg_list[i].length, &e);
        if (!mr) return e == StagError::bounds || e == StagError::to_wrap ? EFAULT : ENOENT;
        int err = 0;
        if (!(mr->access() & access_on_demand)) {
            err = EINVAL;
        } else if (advice != IBV_ADVISE_MR_ADVICE_PREFETCH_NO_FAULT) {
            err = odp_prefetch(mr->at(sg_list[i].addr), sg_list[i].length, write);
            if (!(flags & IBV_ADVISE_MR_FLAG_FLUSH)) err = 0;
        }
        StagTable::release(mr);
        if (err) return err;
    }
    return 0;
}

}  // namespace

const verbs_context_ops kOdpOps = [] {
    verbs_context_ops ops{};
    ops.advise_mr = Guard<advise_mr>::call;
    return ops;
}();

}  // namespace iwemu::provider
