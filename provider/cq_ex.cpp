// Extended CQs (ibv_create_cq_ex) and their poll iterator (ibv_start_poll,
// ibv_next_poll, ibv_end_poll and the read_* accessors).  The CQ is an
// ordinary Cq (objects.h), so the classic verbs work on ibv_cq_ex_to_cq().
#include <endian.h>
#include <time.h>

#include "provider/abi_guard.h"
#include "provider/objects.h"

namespace iwemu::provider {
namespace {

// The wc_flags that mean something on an iWARP RC QP; SLID/SL/DLID_PATH_BITS
// are InfiniBand fields and read 0.  Timestamps: the instant the emulator
// queued the completion (the CQ stamps only when asked).
constexpr uint64_t kSupportedWcFlags = IBV_WC_EX_WITH_BYTE_LEN | IBV_WC_EX_WITH_IMM | IBV_WC_EX_WITH_QP_NUM |
                                       IBV_WC_EX_WITH_SRC_QP | IBV_WC_EX_WITH_SLID | IBV_WC_EX_WITH_SL |
                                       IBV_WC_EX_WITH_DLID_PATH_BITS | IBV_WC_EX_WITH_COMPLETION_TIMESTAMP |
                                       IBV_WC_EX_WITH_COMPLETION_TIMESTAMP_WALLCLOCK;
// Single-threaded is a hint we may ignore; ignoring overrun we cannot honour.
constexpr uint32_t kSupportedCreateFlags = IBV_CREATE_CQ_ATTR_SINGLE_THREADED;

inline Cq* of(ibv_cq_ex* c) { return reinterpret_cast<Cq*>(c); }

// Publishes the entry just polled: status and wr_id live in ibv_cq_ex itself.
int take_next(ibv_cq_ex* c)
{
    Cq* cq = of(c);
    if (cq->emu->poll(&cq->cur, 1, &cq->cur_stamp) != 1) return ENOENT;
    c->status = static_cast<ibv_wc_status>(cq->cur.status);
    c->wr_id = cq->cur.wr_id;
    return 0;
}

int start_poll(ibv_cq_ex* c, ibv_poll_cq_attr* attr)
{
    if (attr && attr->comp_mask) return EINVAL;
    return take_next(c);
}
int next_poll(ibv_cq_ex* c) { return take_next(c); }
void end_poll(ibv_cq_ex*) {}  // nothing held between start and end

ibv_wc_opcode read_opcode(ibv_cq_ex* c) { return static_cast<ibv_wc_opcode>(of(c)->cur.opcode); }
uint32_t read_vendor_err(ibv_cq_ex* c) { return of(c)->cur.vendor_err; }
uint32_t read_byte_len(ibv_cq_ex* c) { return of(c)->cur.byte_len; }
// ibv_wc_read_invalidated_rkey() calls this one too: like ibv_wc's union,
// the immediate goes out in network order, the invalidated STag in host order.
__be32 read_imm_data(ibv_cq_ex* c)
{
    const Completion& e = of(c)->cur;
    return (e.wc_flags & wc_with_imm) ? htobe32(e.imm_data_or_inv_rkey) : e.imm_data_or_inv_rkey;
}
uint32_t read_qp_num(ibv_cq_ex* c) { return of(c)->cur.qp_num; }
uint32_t read_src_qp(ibv_cq_ex* c) { return of(c)->cur.src_qp; }
unsigned int read_wc_flags(ibv_cq_ex* c) { return of(c)->cur.wc_flags; }
uint32_t read_slid(ibv_cq_ex*) { return 0; }
// The device clock is CLOCK_MONOTONIC in ns (hca_core_clock 1 GHz, as
// ibv_query_rt_values_ex reports it); the wall clock is that instant in
// CLOCK_REALTIME, by the offset between the two clocks now.
uint64_t read_completion_ts(ibv_cq_ex* c) { return of(c)->cur_stamp; }
uint64_t read_completion_wallclock_ns(ibv_cq_ex* c)
{
    timespec real{}, mono{};
    clock_gettime(CLOCK_REALTIME, &real);
    clock_gettime(CLOCK_MONOTONIC, &mono);
    const int64_t offset = (int64_t{real.tv_sec} - mono.tv_sec) * 1'000'000'000 + (real.tv_nsec - mono.tv_nsec);
    return of(c)->cur_stamp + static_cast<uint64_t>(offset);
}
uint8_t read_sl(ibv_cq_ex*) { return 0; }
uint8_t read_dlid_path_bits(ibv_cq_ex*) { return 0; }

ibv_cq_ex* create_cq_ex(ibv_context* ctx, ibv_cq_init_attr_ex* attr)
{
    if (attr->comp_mask & ~uint32_t{IBV_CQ_INIT_ATTR_MASK_FLAGS | IBV_CQ_INIT_ATTR_MASK_PD})
        return fail<ibv_cq_ex>(EINVAL);
    if (attr->wc_flags & ~kSupportedWcFlags) return fail<ibv_cq_ex>(EOPNOTSUPP);
    if ((attr->comp_mask & IBV_CQ_INIT_ATTR_MASK_FLAGS) && (attr->flags & ~kSupportedCreateFlags))
        return fail<ibv_cq_ex>(EOPNOTSUPP);
    // PD: a parent domain (as mlx5: a plain PD is EINVAL).  It changes
    // nothing here: no CQ memory comes from its allocators (parent_domain.cpp).
    if ((attr->comp_mask & IBV_CQ_INIT_ATTR_MASK_PD) && attr->parent_domain &&
        (attr->parent_domain->context != ctx || !to_pd(attr->parent_domain)->parent))
        return fail<ibv_cq_ex>(EINVAL);
    if (attr->cqe > static_cast<uint32_t>(INT32_MAX)) return fail<ibv_cq_ex>(EINVAL);
    Cq* cq = make_cq(ctx, static_cast<int>(attr->cqe), attr->channel, static_cast<int>(attr->comp_vector));
    if (!cq) return nullptr;
    ibv_cq_ex& ex = cq->ex;
    ex.start_poll = Guard<start_poll>::call;
    ex.next_poll = Guard<next_poll>::call;
    ex.end_poll = Guard<end_poll>::call;
    ex.read_opcode = read_opcode;
    ex.read_vendor_err = read_vendor_err;
    ex.read_byte_len = read_byte_len;
    ex.read_imm_data = read_imm_data;
    ex.read_qp_num = read_qp_num;
    ex.read_src_qp = read_src_qp;
    ex.read_wc_flags = read_wc_flags;
    ex.read_slid = read_slid;
    ex.read_sl = read_sl;
    ex.read_dlid_path_bits = read_dlid_path_bits;
    if (attr->wc_flags & (IBV_WC_EX_WITH_COMPLETION_TIMESTAMP | IBV_WC_EX_WITH_COMPLETION_TIMESTAMP_WALLCLOCK)) {
        cq->emu->stamp_completions();
        ex.read_completion_ts = read_completion_ts;
        ex.read_completion_wallclock_ns = read_completion_wallclock_ns;
    }
    return &ex;  // libibverbs runs verbs_init_cq on it
}

}  // namespace

const verbs_context_ops kCqExOps = [] {
    verbs_context_ops ops{};
    ops.create_cq_ex = Guard<create_cq_ex>::call;
    return ops;
}();

}  // namespace iwemu::provider
