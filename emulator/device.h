// Device and port attributes: everything ibv_query_device / ibv_query_port /
// ibv_query_gid need, plus the limits the emulator enforces.  Values are at
// least as generous as Linux siw's (drivers/infiniband/sw/siw/siw.h); see
// docs/limits.md for the table and the reasons.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <vector>

namespace iwemu {

// What the device calls itself (ibv_query_device fw_ver, sysfs node_desc).
inline constexpr char firmware_version[] = "iwemu 0.1.0";
inline constexpr char node_description[] = "iwemu user-space iWARP RNIC";

namespace limits {
inline constexpr uint32_t max_qp = 100 * 1024;          // siw: 100K
inline constexpr uint32_t max_qp_wr = 32 * 1024;        // siw: 32K
inline constexpr uint32_t max_sge = 16;                 // siw: 6 (also for the Read sink)
inline constexpr uint32_t max_sge_rd = 16;              // siw: 1
inline constexpr uint32_t max_inline_data = 256;        // siw: 80 (5 of its 6 SGEs); every QP gets it
inline constexpr uint32_t max_cq = 100 * 1024;          // siw: 100K
inline constexpr uint32_t max_cqe = 4 * 1024 * 1024;    // siw: 3.2M
inline constexpr uint32_t max_mr = 1024 * 1024;         // siw: 1M (STag index is 24 bits)
inline constexpr uint64_t max_mr_size = uint64_t{1} << 40;  // no pinning, any size
inline constexpr uint32_t max_pd = 100 * 1024;          // siw: 100K
inline constexpr uint32_t max_mw = 64 * 1024;           // siw: 0 (no windows); share the STag index space with MRs
inline constexpr uint32_t max_ord = 128;                // siw: 128
inline constexpr uint32_t max_ird = 128;                // siw: 128
inline constexpr uint32_t max_srq = 100 * 1024;         // siw: 100K
inline constexpr uint32_t max_srq_wr = 320 * 1024;      // siw: 320K
inline constexpr uint32_t max_srq_sge = 16;             // siw: 6
inline constexpr uint32_t max_msg_size = 0x7FFFFFFF;    // DDP message < 2^32; ibv_port_attr is 32 bit
}  // namespace limits

// == enum ibv_atomic_cap
inline constexpr uint32_t atomic_cap_none = 0;  // IBV_ATOMIC_NONE
inline constexpr uint32_t atomic_cap_hca = 1;   // IBV_ATOMIC_HCA: atomic among this device's atomics

// == struct ibv_device_attr (RC / iWARP relevant fields), host order.
struct DeviceAttributes {
    std::string fw_ver;           // "iwemu <version>"
    uint64_t node_guid = 0;       // host order; the provider converts to __be64
    uint64_t sys_image_guid = 0;
    uint64_t max_mr_size = limits::max_mr_size;
    uint64_t page_size_cap = 4096;  // any page size: regions are not pinned
    uint32_t vendor_id = 0x626d74;  // siw's "bmt" value, a software iWARP vendor id
    uint32_t vendor_part_id = 0x1e0; // arbitrary, distinct from siw (0)
    uint32_t hw_ver = 0;
    uint32_t max_qp = limits::max_qp;
    uint32_t max_qp_wr = limits::max_qp_wr;
    uint32_t device_cap_flags = 0;  // IBV_DEVICE_* bits, see emulator.cpp
    uint32_t max_sge = limits::max_sge;
    uint32_t max_sge_rd = limits::max_sge_rd;
    uint32_t max_cq = limits::max_cq;
    uint32_t max_cqe = limits::max_cqe;
    uint32_t max_mr = limits::max_mr;
    uint32_t max_pd = limits::max_pd;
    uint32_t max_qp_rd_atom = limits::max_ird;       // inbound Reads per QP (IRD)
    uint32_t max_res_rd_atom = limits::max_ird * 1024;
    uint32_t max_qp_init_rd_atom = limits::max_ord;  // outbound Reads per QP (ORD)
    uint32_t atomic_cap = atomic_cap_none;            // set from Config::rfc7306 (emulator.cpp)
    uint32_t max_mw = limits::max_mw;
    uint32_t max_srq = limits::max_srq;
    uint32_t max_srq_wr = limits::max_srq_wr;
    uint32_t max_srq_sge = limits::max_srq_sge;
    uint16_t max_pkeys = 1;
    uint8_t local_ca_ack_delay = 0;
    uint8_t phys_port_cnt = 1;
    uint32_t max_inline_data = limits::max_inline_data;  // not in ibv_device_attr; for the provider
};

// One local address as a GID: IPv4-mapped (::ffff:a.b.c.d) or IPv6, as
// iWARP GIDs are (siw, cxgb4 use the MAC; rdma_cm resolves by address).
using Gid = std::array<uint8_t, 16>;

// == struct ibv_port_attr, host order.
struct PortAttributes {
    uint32_t state = 4;          // IBV_PORT_ACTIVE
    uint32_t max_mtu = 5;        // IBV_MTU_4096
    uint32_t active_mtu = 5;
    int32_t gid_tbl_len = 1;
    uint32_t port_cap_flags = 0;
    uint32_t max_msg_sz = limits::max_msg_size;
    uint16_t pkey_tbl_len = 1;
    uint16_t lid = 0;
    uint8_t active_width = 2;    // IBV_WIDTH_4X
    uint8_t active_speed = 32;   // IBV_SPEED_EDR (25 Gb/s per lane)
    uint8_t phys_state = 5;      // LinkUp
    uint8_t link_layer = 2;      // IBV_LINK_LAYER_ETHERNET
    uint8_t max_vl_num = 1;
};

// Identity derived once per process from the host (first non-loopback
// interface MAC; stable across runs on one host).
struct DeviceIdentity {
    std::array<uint8_t, 6> mac{};    // all zero when no interface has one
    std::vector<Gid> gids;           // gid[0] is the MAC-based EUI-64 GID (siw style)
};

}  // namespace iwemu
