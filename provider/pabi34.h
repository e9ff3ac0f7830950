// libibverbs private provider ABI, version 34 (rdma-core 34 .. 5x).
//
// Debian's libibverbs-dev ships only the public verbs.h; the structures a
// provider shares with libibverbs (driver.h upstream) are declared here from
// their documented layout (kernel-surface.md §2), and every size and offset
// libibverbs relies on is pinned by a static_assert below.  A mismatch is a
// compile error, never a silent corruption; tests/integration/provider_abi
// checks the same numbers at run time through the real libibverbs.
#pragma once

#include <infiniband/verbs.h>

#include <cstddef>
#include <cstdint>
#include <ctime>

extern "C" {

struct verbs_list_node {
    verbs_list_node* next;
    verbs_list_node* prev;
};

enum verbs_match_kind : uint8_t {
    VERBS_MATCH_SENTINEL = 0,
    VERBS_MATCH_PCI = 1,
    VERBS_MATCH_MODALIAS = 2,
    VERBS_MATCH_DRIVER_ID = 3,
};

struct verbs_match_ent {
    void* driver_data;
    union {
        const char* modalias;
        uint64_t driver_id;
    } u;
    uint16_t vendor;
    uint16_t device;
    uint8_t kind;
};

enum verbs_sysfs_flags : unsigned {
    VSYSFS_READ_MODALIAS = 1u << 0,
    VSYSFS_READ_NODE_GUID = 1u << 1,
};

struct verbs_sysfs_dev {
    verbs_list_node entry;
    void* provider_data;
    const verbs_match_ent* match;
    unsigned flags;
    char sysfs_name[IBV_SYSFS_NAME_MAX];
    dev_t sysfs_cdev;
    char ibdev_name[IBV_SYSFS_NAME_MAX];
    char ibdev_path[IBV_SYSFS_PATH_MAX];
    char modalias[512];
    uint64_t node_guid;
    uint32_t driver_id;
    ibv_node_type node_type;
    int ibdev_idx;
    uint32_t num_ports;
    uint32_t abi_ver;
    timespec time_created;
};

struct verbs_device;

struct verbs_device_ops {
    const char* name;
    uint32_t match_min_abi_version;
    uint32_t match_max_abi_version;
    const verbs_match_ent* match_table;
    const verbs_device_ops** static_providers;
    bool (*match_device)(verbs_sysfs_dev* sysfs_dev);
    verbs_context* (*alloc_context)(ibv_device* device, int cmd_fd, void* private_data);
    verbs_context* (*import_context)(ibv_device* device, int cmd_fd);
    verbs_device* (*alloc_device)(verbs_sysfs_dev* sysfs_dev);
    void (*uninit_device)(verbs_device* device);
};

struct verbs_device {
    ibv_device device;  // libibverbs asserts device._ops stays zero
    const verbs_device_ops* ops;
    int refcount;       // atomic_int upstream; owned by libibverbs
    verbs_list_node entry;
    verbs_sysfs_dev* sysfs;
    uint64_t core_support;
};

// The ibv_mr handed to libibverbs must be the head of this: ibv_dereg_mr and
// ibv_rereg_mr read mr_type/access through container_of.
enum verbs_mr_type : int { IBV_MR_TYPE_MR = 0, IBV_MR_TYPE_NULL_MR, IBV_MR_TYPE_IMPORTED_MR, IBV_MR_TYPE_DMABUF_MR };

struct verbs_mr {
    ibv_mr ibv_mr;
    verbs_mr_type mr_type;
    int access;
};

enum { VERBS_QP_XRCD = 1, VERBS_QP_EX = 2 };

struct verbs_xrcd;

struct verbs_qp {
    union {
        ibv_qp qp;
        ibv_qp_ex qp_ex;
    };
    uint32_t comp_mask;
    struct verbs_xrcd* xrcd;
};

// 76 operations in alphabetical order; a NULL entry keeps libibverbs' dummy
// (EOPNOTSUPP).  The order IS the ABI.
struct verbs_context_ops {
    int (*advise_mr)(ibv_pd*, ibv_advise_mr_advice, uint32_t, ibv_sge*, uint32_t);
    ibv_dm* (*alloc_dm)(ibv_context*, ibv_alloc_dm_attr*);
    ibv_mw* (*alloc_mw)(ibv_pd*, ibv_mw_type);
    ibv_mr* (*alloc_null_mr)(ibv_pd*);
    ibv_pd* (*alloc_parent_domain)(ibv_context*, ibv_parent_domain_init_attr*);
    ibv_pd* (*alloc_pd)(ibv_context*);
    ibv_td* (*alloc_td)(ibv_context*, ibv_td_init_attr*);
    void (*async_event)(ibv_context*, ibv_async_event*);
    int (*attach_counters_point_flow)(ibv_counters*, ibv_counter_attach_attr*, ibv_flow*);
    int (*attach_mcast)(ibv_qp*, const ibv_gid*, uint16_t);
    int (*bind_mw)(ibv_qp*, ibv_mw*, ibv_mw_bind*);
    int (*close_xrcd)(ibv_xrcd*);
    void (*cq_event)(ibv_cq*);
    ibv_ah* (*create_ah)(ibv_pd*, ibv_ah_attr*);
    ibv_counters* (*create_counters)(ibv_context*, ibv_counters_init_attr*);
    ibv_cq* (*create_cq)(ibv_context*, int, ibv_comp_channel*, int);
    ibv_cq_ex* (*create_cq_ex)(ibv_context*, ibv_cq_init_attr_ex*);
    ibv_flow* (*create_flow)(ibv_qp*, ibv_flow_attr*);
    ibv_flow_action* (*create_flow_action_esp)(ibv_context*, ibv_flow_action_esp_attr*);
    ibv_qp* (*create_qp)(ibv_pd*, ibv_qp_init_attr*);
    ibv_qp* (*create_qp_ex)(ibv_context*, ibv_qp_init_attr_ex*);
    ibv_rwq_ind_table* (*create_rwq_ind_table)(ibv_context*, ibv_rwq_ind_table_init_attr*);
    ibv_srq* (*create_srq)(ibv_pd*, ibv_srq_init_attr*);
    ibv_srq* (*create_srq_ex)(ibv_context*, ibv_srq_init_attr_ex*);
    ibv_wq* (*create_wq)(ibv_context*, ibv_wq_init_attr*);
    int (*dealloc_mw)(ibv_mw*);
    int (*dealloc_pd)(ibv_pd*);
    int (*dealloc_td)(ibv_td*);
    int (*dereg_mr)(verbs_mr*);
    int (*destroy_ah)(ibv_ah*);
    int (*destroy_counters)(ibv_counters*);
    int (*destroy_cq)(ibv_cq*);
    int (*destroy_flow)(ibv_flow*);
    int (*destroy_flow_action)(ibv_flow_action*);
    int (*destroy_qp)(ibv_qp*);
    int (*destroy_rwq_ind_table)(ibv_rwq_ind_table*);
    int (*destroy_srq)(ibv_srq*);
    int (*destroy_wq)(ibv_wq*);
    int (*detach_mcast)(ibv_qp*, const ibv_gid*, uint16_t);
    void (*free_context)(ibv_context*);
    int (*free_dm)(ibv_dm*);
    int (*get_srq_num)(ibv_srq*, uint32_t*);
    ibv_dm* (*import_dm)(ibv_context*, uint32_t);
    ibv_mr* (*import_mr)(ibv_pd*, uint32_t);
    ibv_pd* (*import_pd)(ibv_context*, uint32_t);
    int (*modify_cq)(ibv_cq*, ibv_modify_cq_attr*);
    int (*modify_flow_action_esp)(ibv_flow_action*, ibv_flow_action_esp_attr*);
    int (*modify_qp)(ibv_qp*, ibv_qp_attr*, int);
    int (*modify_qp_rate_limit)(ibv_qp*, ibv_qp_rate_limit_attr*);
    int (*modify_srq)(ibv_srq*, ibv_srq_attr*, int);
    int (*modify_wq)(ibv_wq*, ibv_wq_attr*);
    ibv_qp* (*open_qp)(ibv_context*, ibv_qp_open_attr*);
    ibv_xrcd* (*open_xrcd)(ibv_context*, ibv_xrcd_init_attr*);
    int (*poll_cq)(ibv_cq*, int, ibv_wc*);
    int (*post_recv)(ibv_qp*, ibv_recv_wr*, ibv_recv_wr**);
    int (*post_send)(ibv_qp*, ibv_send_wr*, ibv_send_wr**);
    int (*post_srq_ops)(ibv_srq*, ibv_ops_wr*, ibv_ops_wr**);
    int (*post_srq_recv)(ibv_srq*, ibv_recv_wr*, ibv_recv_wr**);
    int (*query_device_ex)(ibv_context*, const ibv_query_device_ex_input*, ibv_device_attr_ex*, size_t);
    int (*query_ece)(ibv_qp*, ibv_ece*);
    int (*query_port)(ibv_context*, uint8_t, ibv_port_attr*);
    int (*query_qp)(ibv_qp*, ibv_qp_attr*, int, ibv_qp_init_attr*);
    int (*query_qp_data_in_order)(ibv_qp*, ibv_wr_opcode, uint32_t);
    int (*query_rt_values)(ibv_context*, ibv_values_ex*);
    int (*query_srq)(ibv_srq*, ibv_srq_attr*);
    int (*read_counters)(ibv_counters*, uint64_t*, uint32_t, uint32_t);
    ibv_mr* (*reg_dm_mr)(ibv_pd*, ibv_dm*, uint64_t, size_t, unsigned int);
    ibv_mr* (*reg_dmabuf_mr)(ibv_pd*, uint64_t, size_t, uint64_t, int, int);
    ibv_mr* (*reg_mr)(ibv_pd*, void*, size_t, uint64_t, int);
    int (*req_notify_cq)(ibv_cq*, int);
    int (*rereg_mr)(verbs_mr*, int, ibv_pd*, void*, size_t, int);
    int (*resize_cq)(ibv_cq*, int);
    int (*set_ece)(ibv_qp*, ibv_ece*);
    void (*unimport_dm)(ibv_dm*);
    void (*unimport_mr)(ibv_mr*);
    void (*unimport_pd)(ibv_pd*);
};

// Exported by libibverbs.so.1 under the version node IBVERBS_PRIVATE_34.
void verbs_register_driver_34(const verbs_device_ops* ops);
void* _verbs_init_and_alloc_context(ibv_device* device, int cmd_fd, size_t alloc_size,
                                    verbs_context* context_offset, uint32_t driver_id);
void verbs_set_ops(verbs_context* vctx, const verbs_context_ops* ops);
void verbs_uninit_context(verbs_context* context);

}  // extern "C"

// RDMA_DRIVER_UNKNOWN: no in-kernel driver id exists for iwemu.
inline constexpr uint32_t kIwemuDriverId = 0;

// ---- layout pins (x86_64 LP64), kernel-surface.md §2.2 .. §2.9 ----
static_assert(sizeof(verbs_match_ent) == 24);
static_assert(offsetof(verbs_match_ent, u) == 8);
static_assert(offsetof(verbs_match_ent, vendor) == 16);
static_assert(offsetof(verbs_match_ent, device) == 18);
static_assert(offsetof(verbs_match_ent, kind) == 20);

static_assert(sizeof(verbs_device_ops) == 72);
static_assert(offsetof(verbs_device_ops, match_table) == 16);
static_assert(offsetof(verbs_device_ops, static_providers) == 24);
static_assert(offsetof(verbs_device_ops, match_device) == 32);
static_assert(offsetof(verbs_device_ops, alloc_context) == 40);
static_assert(offsetof(verbs_device_ops, import_context) == 48);
static_assert(offsetof(verbs_device_ops, alloc_device) == 56);
static_assert(offsetof(verbs_device_ops, uninit_device) == 64);

static_assert(sizeof(ibv_device) == 664);
static_assert(sizeof(verbs_device) == 712);
static_assert(offsetof(verbs_device, ops) == 664);
static_assert(offsetof(verbs_device, refcount) == 672);
static_assert(offsetof(verbs_device, entry) == 680);
static_assert(offsetof(verbs_device, sysfs) == 696);
static_assert(offsetof(verbs_device, core_support) == 704);

static_assert(sizeof(verbs_sysfs_dev) == 992);
static_assert(offsetof(verbs_sysfs_dev, provider_data) == 16);
static_assert(offsetof(verbs_sysfs_dev, match) == 24);
static_assert(offsetof(verbs_sysfs_dev, flags) == 32);
static_assert(offsetof(verbs_sysfs_dev, sysfs_name) == 36);
static_assert(offsetof(verbs_sysfs_dev, sysfs_cdev) == 104);
static_assert(offsetof(verbs_sysfs_dev, ibdev_name) == 112);
static_assert(offsetof(verbs_sysfs_dev, ibdev_path) == 176);
static_assert(offsetof(verbs_sysfs_dev, modalias) == 432);
static_assert(offsetof(verbs_sysfs_dev, node_guid) == 944);
static_assert(offsetof(verbs_sysfs_dev, driver_id) == 952);
static_assert(offsetof(verbs_sysfs_dev, node_type) == 956);
static_assert(offsetof(verbs_sysfs_dev, ibdev_idx) == 960);
static_assert(offsetof(verbs_sysfs_dev, num_ports) == 964);
static_assert(offsetof(verbs_sysfs_dev, abi_ver) == 968);
static_assert(offsetof(verbs_sysfs_dev, time_created) == 976);

static_assert(sizeof(verbs_context) == 648);
static_assert(offsetof(verbs_context, context) == 320);
static_assert(offsetof(verbs_context, sz) == 312);
static_assert(offsetof(ibv_context, cmd_fd) == 264);
static_assert(offsetof(ibv_context, async_fd) == 268);
static_assert(offsetof(ibv_context, num_comp_vectors) == 272);
static_assert(offsetof(ibv_context, abi_compat) == 320);

static_assert(sizeof(verbs_context_ops) == 608);
static_assert(offsetof(verbs_context_ops, alloc_pd) == 40);
static_assert(offsetof(verbs_context_ops, create_cq) == 120);
static_assert(offsetof(verbs_context_ops, create_qp) == 152);
static_assert(offsetof(verbs_context_ops, dereg_mr) == 224);
static_assert(offsetof(verbs_context_ops, free_context) == 312);
static_assert(offsetof(verbs_context_ops, poll_cq) == 424);
static_assert(offsetof(verbs_context_ops, query_device_ex) == 464);
static_assert(offsetof(verbs_context_ops, query_port) == 480);
static_assert(offsetof(verbs_context_ops, reg_mr) == 544);
static_assert(offsetof(verbs_context_ops, unimport_pd) == 600);

static_assert(sizeof(verbs_mr) == 56);
static_assert(offsetof(verbs_mr, mr_type) == 48);
static_assert(offsetof(verbs_mr, access) == 52);
static_assert(sizeof(verbs_qp) == 368);
static_assert(offsetof(verbs_qp, comp_mask) == 352);
static_assert(offsetof(verbs_qp, xrcd) == 360);
