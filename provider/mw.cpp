// Memory windows: ibv_alloc_mw, ibv_dealloc_mw, ibv_bind_mw (type 1), and
// the conversion of a bind work request (IBV_WR_BIND_MW, and ibv_qp_ex's
// wr_bind_mw) into the emulator's MwBind.  Binding happens in the emulator
// when the QP's send queue reaches the WR (emulator/qp/memory_window.cpp).
#include <cstdlib>

#include "provider/abi_guard.h"
#include "provider/objects.h"

namespace iwemu::provider {

MwBind to_emu_bind(ibv_mw* mw, uint32_t rkey, const ibv_mw_bind_info& info)
{
    MwBind b;
    b.mw = mw ? to_mw(mw)->emu : nullptr;
    b.mr = info.mr ? reinterpret_cast<Mr*>(info.mr)->emu : nullptr;  // ibv_mr heads verbs_mr heads Mr
    b.addr = info.addr;
    b.length = info.length;
    b.rkey = rkey;
    b.access = info.mw_access_flags;
    return b;
}

namespace {

ibv_mw* alloc_mw(ibv_pd* ibpd, ibv_mw_type type)
{
    // Types other than 1 and 2 are invalid, not unsupported (rdma-core's
    // test_reg_mw_wrong_type): the emulator says EINVAL.
    auto* mw = static_cast<Mw*>(calloc(1, sizeof(Mw)));
    if (!mw) return fail<ibv_mw>(ENOMEM);
    if (int err = emu().alloc_mw(to_pd(ibpd)->emu, static_cast<MwType>(type), &mw->emu)) {
        free(mw);
        return fail<ibv_mw>(err);
    }
    mw->emu->user_context = mw;
    mw->ibv.context = ibpd->context;
    mw->ibv.pd = ibpd;
    mw->ibv.rkey = mw->emu->rkey();
    mw->ibv.handle = mw->emu->rkey() >> 8;
    mw->ibv.type = type;
    track(ibpd->context, &ContextObjects::mws, mw);
    return &mw->ibv;
}

int dealloc_mw(ibv_mw* ibmw)
{
    Mw* mw = to_mw(ibmw);
    if (int err = emu().dealloc_mw(mw->emu)) return fail_status(err);
    untrack(ibmw->context, &ContextObjects::mws, mw);
    free(mw);
    return 0;
}

// ibv_bind_mw: a bind WR on the QP's send queue, completing with
// IBV_WC_BIND_MW.  As the verbs promise, mw->rkey holds the new key on
// return (the application restores it if the completion reports an error).
int bind_mw(ibv_qp* ibqp, ibv_mw* ibmw, ibv_mw_bind* mw_bind)
{
    const ibv_mw_bind_info& info = mw_bind->bind_info;
    if (ibmw->type != IBV_MW_TYPE_1) return fail_status(EINVAL);  // type 2: IBV_WR_BIND_MW
    if (!info.mr && (info.addr || info.length)) return fail_status(EINVAL);
    if (info.mw_access_flags & IBV_ACCESS_ZERO_BASED) return fail_status(EINVAL);  // as rxe, mlx5
    if (info.mr && info.mr->pd != ibmw->pd) return fail_status(EPERM);
    SendWr wr;
    wr.wr_id = mw_bind->wr_id;
    wr.opcode = WrOpcode::bind_mw;
    wr.send_flags = mw_bind->send_flags;
    wr.bind = to_emu_bind(ibmw, ibv_inc_rkey(ibmw->rkey), info);
    size_t bad = 0;
    if (int err = to_qp(ibqp)->emu->post_send(&wr, 1, &bad)) return fail_status(err);
    ibmw->rkey = wr.bind.rkey;
    return 0;
}

}  // namespace

const verbs_context_ops kMwOps = [] {
    verbs_context_ops ops{};
    ops.alloc_mw = Guard<alloc_mw>::call;
    ops.dealloc_mw = Guard<dealloc_mw>::call;
    ops.bind_mw = Guard<bind_mw>::call;
    return ops;
}();

}  // namespace iwemu::provider
