// ibv_query_device(_ex) and ibv_query_port.  Capabilities come from the
// emulator (Emulator::device_attributes / port_attributes); identity (node GUID, GID
// table length) from the sysfs tree the shim generated, which is also where
// libibverbs serves GID and P_Key queries from (kernel-surface.md §3.5), so
// the two can never disagree.
#include <endian.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <ctime>

#include "emulator/emulator.h"
#include "provider/abi_guard.h"
#include "provider/provider.h"

namespace iwemu::provider {
namespace {

void fill_device_attr(const Device& dev, const DeviceAttributes& a, ibv_device_attr* out)
{
    std::memset(out, 0, sizeof *out);
    std::snprintf(out->fw_ver, sizeof out->fw_ver, "%s", a.fw_ver.empty() ? "iwemu" : a.fw_ver.c_str());
    out->node_guid = htobe64(dev.node_guid);
    out->sys_image_guid = htobe64(dev.node_guid);
    out->max_mr_size = a.max_mr_size;
    out->page_size_cap = a.page_size_cap;
    out->vendor_id = a.vendor_id;
    out->vendor_part_id = a.vendor_part_id;
    out->hw_ver = a.hw_ver;
    out->max_qp = static_cast<int>(a.max_qp);
    out->max_qp_wr = static_cast<int>(a.max_qp_wr);
    out->device_cap_flags = a.device_cap_flags;
    out->max_sge = static_cast<int>(a.max_sge);
    out->max_sge_rd = static_cast<int>(a.max_sge_rd);
    out->max_cq = static_cast<int>(a.max_cq);
    out->max_cqe = static_cast<int>(a.max_cqe);
    out->max_mr = static_cast<int>(a.max_mr);
    out->max_pd = static_cast<int>(a.max_pd);
    // librdmacm keeps these as uint8_t (pitfall 23): never a multiple of 256.
    out->max_qp_rd_atom = static_cast<int>(std::min<uint32_t>(a.max_qp_rd_atom, 255));
    out->max_qp_init_rd_atom = static_cast<int>(std::min<uint32_t>(a.max_qp_init_rd_atom, 255));
    out->max_res_rd_atom = static_cast<int>(a.max_res_rd_atom);
    out->max_ee_rd_atom = 0;
    out->atomic_cap = static_cast<ibv_atomic_cap>(a.atomic_cap);
    out->max_mw = static_cast<int>(a.max_mw);
    out->max_srq = static_cast<int>(a.max_srq);
    out->max_srq_wr = static_cast<int>(a.max_srq_wr);
    out->max_srq_sge = static_cast<int>(a.max_srq_sge);
    out->max_pkeys = a.max_pkeys;
    out->local_ca_ack_delay = a.local_ca_ack_delay;
    out->phys_port_cnt = a.phys_port_cnt;
}

// ibv_query_device() arrives here with attr_size == sizeof(ibv_device_attr):
// write no byte beyond what the caller owns.
constexpr uint64_t kRawClockKhz = 1000000;

int query_device_ex(ibv_context* ctx, const ibv_query_device_ex_input* input, ibv_device_attr_ex* attr,
                    size_t attr_size)
{
    if (input && input->comp_mask) return EINVAL;
    if (attr_size < sizeof(ibv_device_attr)) return EINVAL;
    ibv_device_attr_ex full{};
    fill_device_attr(*to_device(ctx->device), Emulator::instance().device_attributes(), &full.orig_attr);
    full.phys_port_cnt_ex = full.orig_attr.phys_port_cnt;
    // On-demand paging (odp.cpp, emulator/odp_memory.h): nothing is ever
    // pinned, so any RC operation may target an ODP region, also the
    // implicit one (addr NULL, length SIZE_MAX).  RC only: no UD/UC/XRC.
    full.odp_caps.general_caps = IBV_ODP_SUPPORT | IBV_ODP_SUPPORT_IMPLICIT;
    full.odp_caps.per_transport_caps.rc_odp_caps = IBV_ODP_SUPPORT_SEND | IBV_ODP_SUPPORT_RECV |
                                                   IBV_ODP_SUPPORT_WRITE | IBV_ODP_SUPPORT_READ |
                                                   IBV_ODP_SUPPORT_SRQ_RECV | IBV_ODP_SUPPORT_ATOMIC;
    // query_rt_values' raw clock counts nanoseconds: 1 GHz, in kHz.  No
    // completion carries a timestamp (completion_timestamp_mask 0).
    full.hca_core_clock = kRawClockKhz;
    std::memcpy(attr, &full, std::min(attr_size, sizeof full));
    return 0;
}

// ibv_query_rt_values_ex: the device clock is CLOCK_MONOTONIC in ns, a
// free-running counter in raw_clock.tv_nsec as mlx5 reports its cycles.
int query_rt_values(ibv_context*, ibv_values_ex* values)
{
    uint32_t done = 0;
    if (values->comp_mask & IBV_VALUES_MASK_RAW_CLOCK) {
        timespec now{};
        clock_gettime(CLOCK_MONOTONIC, &now);
        values->raw_clock.tv_sec = 0;
        values->raw_clock.tv_nsec = static_cast<long>(now.tv_sec) * 1000000000L + now.tv_nsec;
        done |= IBV_VALUES_MASK_RAW_CLOCK;
    }
    values->comp_mask = done;
    return 0;
}

int query_port(ibv_context* ctx, uint8_t port, ibv_port_attr* attr)
{
    if (port != 1) return EINVAL;
    const PortAttributes& p = Emulator::instance().port_attributes();
    std::memset(attr, 0, sizeof *attr);
    attr->state = static_cast<ibv_port_state>(p.state);
    attr->max_mtu = static_cast<ibv_mtu>(p.max_mtu);
    attr->active_mtu = static_cast<ibv_mtu>(p.active_mtu);
    attr->gid_tbl_len = to_device(ctx->device)->gid_count;
    attr->port_cap_flags = p.port_cap_flags;
    attr->max_msg_sz = p.max_msg_sz;
    attr->pkey_tbl_len = p.pkey_tbl_len;
    attr->lid = p.lid;
    attr->max_vl_num = p.max_vl_num;
    attr->active_width = p.active_width;
    attr->active_speed = p.active_speed;
    attr->phys_state = p.phys_state;
    attr->link_layer = p.link_layer;
    return 0;
}

}  // namespace

const verbs_context_ops kQueryOps = [] {
    verbs_context_ops ops{};
    ops.query_device_ex = Guard<query_device_ex>::call;
    ops.query_port = Guard<query_port>::call;
    ops.query_rt_values = Guard<query_rt_values>::call;
    return ops;
}();

}  // namespace iwemu::provider
