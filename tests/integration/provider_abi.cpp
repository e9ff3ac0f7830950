// Checks the private provider ABI (PABI 34, kernel-surface.md §2) at run
// time, through the real libibverbs: the provider's own declarations
// (provider/pabi34.h, whose sizes are also static_asserted) are used to read
// what libibverbs built, and every value read must be the one libibverbs
// put there -- a wrong offset reads garbage and fails here.
#include <infiniband/verbs.h>

#include <fcntl.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <sys/sysmacros.h>
#include <initializer_list>

#include "check.h"
#include "rc_qp_attr.h"
#include "provider/pabi34.h"

int main()
{
    int n = 0;
    ibv_device** list = ibv_get_device_list(&n);
    ibv_device* dev = nullptr;
    for (int i = 0; list && i < n; ++i)
        if (!std::strcmp(ibv_get_device_name(list[i]), "iwemu0")) dev = list[i];
    if (!dev) {
        std::fprintf(stderr, "iwemu0 not found (run under iwemu-run)\n");
        return 1;
    }

    // verbs_device: libibverbs filled ops, refcount, sysfs behind the public ibv_device.
    auto* vdev = reinterpret_cast<verbs_device*>(dev);
    CHECK(vdev->device._ops._dummy1 == nullptr && vdev->device._ops._dummy2 == nullptr);
    CHECK(vdev->ops != nullptr && vdev->ops->name && !std::strcmp(vdev->ops->name, "iwemu"));
    CHECK(vdev->ops->alloc_context != nullptr && vdev->ops->alloc_device != nullptr);
    CHECK(vdev->ops->match_table && vdev->ops->match_table[0].kind == VERBS_MATCH_MODALIAS);
    CHECK(vdev->refcount >= 1);
    CHECK(vdev->sysfs != nullptr);

    // verbs_sysfs_dev: names, paths and flags libibverbs read from sysfs.
    // Discovery by the shim's netlink answers, or by sysfs with IWEMU_NETLINK=off.
    const char* nl_env = std::getenv("IWEMU_NETLINK");
    const bool netlink = !(nl_env && !std::strcmp(nl_env, "off"));
    const verbs_sysfs_dev* s = vdev->sysfs;
    CHECK(!std::strcmp(s->sysfs_name, "uverbs0"));
    CHECK(!std::strcmp(s->ibdev_name, "iwemu0"));
    CHECK(std::strstr(s->ibdev_path, "/class/infiniband/iwemu0") != nullptr);
    CHECK(!std::strcmp(s->ibdev_path, dev->ibdev_path));
    CHECK(s->sysfs_cdev == makedev(231, 192));  // GET_CHARDEV, or the uverbs0/dev file: both as ib_uverbs
    CHECK(s->node_type == IBV_NODE_RNIC);
    CHECK(s->ibdev_idx == (netlink ? 0 : -1));
    CHECK(s->abi_ver == 1);
    CHECK(s->match == &vdev->ops->match_table[0]);
    CHECK(s->flags & VSYSFS_READ_NODE_GUID);
    CHECK(s->node_guid == 0x026977656d750001ull);
    if (!netlink) CHECK(s->time_created.tv_sec > 0);  // the ibdev directory's mtime
    CHECK(ibv_get_device_guid(dev) == htobe64(0x026977656d750001ull));
    CHECK(ibv_get_device_index(dev) == (netlink ? 0 : -1));
    CHECK(dev->node_type == IBV_NODE_RNIC && dev->transport_type == IBV_TRANSPORT_IWARP);
    CHECK(!std::strcmp(dev->dev_name, "uverbs0"));

    // verbs_context: the extension block before ibv_context.
    ibv_context* ctx = ibv_open_device(dev);
    CHECK(ctx != nullptr);
    if (ctx) {
        verbs_context* vctx = verbs_get_ctx(ctx);
        CHECK(vctx != nullptr);
        CHECK(ctx->abi_compat == reinterpret_cast<void*>(-1));
        if (vctx) {
            CHECK(reinterpret_cast<char*>(ctx) - reinterpret_cast<char*>(vctx) == 320);
            CHECK(vctx->sz == sizeof(verbs_context));
            CHECK(vctx->query_device_ex != nullptr);
            CHECK(vctx->create_qp_ex != nullptr);
        }
        CHECK(ctx->device == dev);
        CHECK(ctx->async_fd >= 0 && ctx->cmd_fd >= 0);
        CHECK(ctx->num_comp_vectors == 1);
        CHECK(vdev->refcount >= 2);  // the open context holds a reference

        // ibv_query_device must not write past struct ibv_device_attr.
        struct {
            ibv_device_attr attr;
            unsigned char canary[256];
        } probe;
        std::memset(&probe, 0xa5, sizeof probe);
        CHECK(ibv_query_device(ctx, &probe.attr) == 0);
        bool intact = true;
        for (unsigned char c : probe.canary) intact = intact && c == 0xa5;
        CHECK(intact);

        // verbs_mr: libibverbs reads mr_type/access behind the ibv_mr.
        ibv_pd* pd = ibv_alloc_pd(ctx);
        CHECK(pd != nullptr);
        static char buf[4096];
        const int access = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_READ;
        ibv_mr* mr = pd ? ibv_reg_mr(pd, buf, sizeof buf, access) : nullptr;
        CHECK(mr != nullptr);
        if (mr) {
            auto* vmr = reinterpret_cast<verbs_mr*>(mr);
            CHECK(vmr->mr_type == IBV_MR_TYPE_MR);
            CHECK(vmr->access == access);
            CHECK(mr->context == ctx && mr->pd == pd);
            CHECK(ibv_dereg_mr(mr) == 0);
        }
        // verbs_qp: comp_mask says the ibv_qp_ex API is not offered.
        ibv_cq* cq = ibv_create_cq(ctx, 4, nullptr, nullptr, 0);
        CHECK(cq != nullptr);
        if (pd && cq) {
            ibv_qp_init_attr ia = iwemu::test::rc_qp_attr(cq, {2, 2, 1, 1, 0});
            ibv_qp* qp = ibv_create_qp(pd, &ia);
            CHECK(qp != nullptr);
            if (qp) {
                CHECK(reinterpret_cast<verbs_qp*>(qp)->comp_mask == 0);
                CHECK(ibv_qp_to_qp_ex(qp) == nullptr);
                CHECK(qp->context == ctx);
                CHECK(ibv_destroy_qp(qp) == 0);
            }
        }
        // Memory windows: ibv_mw filled as the kernel path fills it; no type 3.
        for (ibv_mw_type type : {IBV_MW_TYPE_1, IBV_MW_TYPE_2}) {
            ibv_mw* mw = ibv_alloc_mw(pd, type);
            CHECK(mw != nullptr);
            if (!mw) continue;
            CHECK(mw->context == ctx && mw->pd == pd && mw->type == type && (mw->rkey >> 8) != 0);
            CHECK(ibv_dealloc_mw(mw) == 0);
        }
        errno = 0;
        CHECK(ibv_alloc_mw(pd, static_cast<ibv_mw_type>(3)) == nullptr && errno == EINVAL);
        // Unsupported verbs answer like rdma-core's dummies.
        ibv_xrcd_init_attr xattr{};
        xattr.comp_mask = IBV_XRCD_INIT_ATTR_FD | IBV_XRCD_INIT_ATTR_OFLAGS;
        xattr.fd = -1;
        xattr.oflags = O_CREAT;
        CHECK(ibv_open_xrcd(ctx, &xattr) == nullptr && errno == EOPNOTSUPP);
        if (cq) CHECK(ibv_destroy_cq(cq) == 0);
        if (pd) CHECK(ibv_dealloc_pd(pd) == 0);
        CHECK(ibv_close_device(ctx) == 0);
    }
    ibv_free_device_list(list);

    return iwemu::test::check_exit_status("provider_abi", "layouts agree with libibverbs");
}
