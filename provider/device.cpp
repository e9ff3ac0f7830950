// Registration, device matching and context life cycle
// (kernel-surface.md §1.4, §2.3 .. §2.8).
#include <dlfcn.h>
#include <fcntl.h>
#include <fnmatch.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <dirent.h>
#include <new>
#include <string>

#include "provider/abi_guard.h"
#include "provider/provider.h"

namespace iwemu::provider {
namespace {

constexpr uint32_t kAbiMin = 1;  // the shim's uverbsN/abi_version is 1
constexpr uint32_t kAbiMax = 1;

// Sysfs mode carries no driver id, so devices are matched by name:
// libibverbs fnmatch()es "rdma_device:N<ibdev>" against MODALIAS patterns.
const verbs_match_ent kMatchTable[] = {
    {nullptr, {"rdma_device:*Niwemu*"}, 0, 0, VERBS_MATCH_MODALIAS},
    {},
};

bool read_sysfs(const char* ibdev_path, const char* file, char* buf, size_t size)
{
    std::string path = std::string(ibdev_path) + "/" + file;
    int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) return false;
    ssize_t n = read(fd, buf, size - 1);
    close(fd);
    if (n <= 0) return false;
    buf[n] = '\0';
    return true;
}

uint64_t parse_node_guid(const char* text)
{
    unsigned g[4];
    if (std::sscanf(text, "%4x:%4x:%4x:%4x", &g[0], &g[1], &g[2], &g[3]) != 4) return 0;
    return uint64_t{g[0]} << 48 | uint64_t{g[1]} << 32 | uint64_t{g[2]} << 16 | g[3];
}

int count_gids(const char* ibdev_path)
{
    std::string dir = std::string(ibdev_path) + "/ports/1/gids";
    int count = 0;
    while (true) {
        std::string file = dir + "/" + std::to_string(count);
        if (access(file.c_str(), R_OK) != 0) break;
        ++count;
    }
    return count ? count : 1;
}

bool match_device(verbs_sysfs_dev* sysfs_dev)
{
    // The table hit is what decides; the node type guards against a foreign
    // device that happens to carry "iwemu" in its name.
    return sysfs_dev->match != nullptr && sysfs_dev->node_type == IBV_NODE_RNIC;
}

verbs_device* alloc_device(verbs_sysfs_dev* sysfs_dev)
{
    auto* dev = static_cast<Device*>(calloc(1, sizeof(Device)));
    if (!dev) return nullptr;
    char buf[64];
    if (read_sysfs(sysfs_dev->ibdev_path, "node_guid", buf, sizeof buf)) dev->node_guid = parse_node_guid(buf);
    dev->gid_count = count_gids(sysfs_dev->ibdev_path);
    // Answer ibv_get_device_guid() from the same value without another read.
    sysfs_dev->node_guid = dev->node_guid;
    sysfs_dev->flags |= VSYSFS_READ_NODE_GUID;
    return &dev->vdev;
}

void uninit_device(verbs_device* vdev) { free(reinterpret_cast<Device*>(vdev)); }

void free_context(ibv_context* ibctx)
{
    Context* ctx = to_context(ibctx);
    unregister_context(ctx);
    if (ctx->async_writer >= 0) close(ctx->async_writer);
    verbs_uninit_context(&ctx->vctx);  // closes cmd_fd and async_fd
    free(ctx);
}

const verbs_context_ops kContextOps = [] {
    verbs_context_ops ops{};
    ops.free_context = Guard<free_context>::call;
    return ops;
}();

verbs_context* alloc_context(ibv_device* ibdev, int cmd_fd, void* private_data)
{
    auto* ctx = static_cast<Context*>(_verbs_init_and_alloc_context(
        ibdev, cmd_fd, sizeof(Context), reinterpret_cast<verbs_context*>(offsetof(Context, vctx)), kIwemuDriverId));
    if (!ctx) return nullptr;
    int reader = -1;
    if (int err = setup_context(ctx, uverbs_file_of(cmd_fd), &reader)) {
        errno = err;
        return nullptr;
    }
    // The async event file: libibverbs would otherwise ask the kernel for
    // one (ASYNC_EVENT/ALLOC ioctl) and fail the open.
    ctx->vctx.context.async_fd = reader;
    return &ctx->vctx;
}

const verbs_device_ops kDeviceOps = {
    .name = "iwemu",
    .match_min_abi_version = kAbiMin,
    .match_max_abi_version = kAbiMax,
    .match_table = kMatchTable,
    .static_providers = nullptr,
    .match_device = Guard<match_device>::call,
    .alloc_context = Guard<alloc_context>::call,
    .import_context = Guard<import_context>::call,  // import.cpp
    .alloc_device = Guard<alloc_device>::call,
    .uninit_device = Guard<uninit_device>::call,
};

__attribute__((constructor)) void register_driver() { verbs_register_driver_34(&kDeviceOps); }

}  // namespace

uint64_t uverbs_file_of(int cmd_fd)
{
    using FileFn = uint64_t (*)(int);
    static auto fn = reinterpret_cast<FileFn>(dlsym(RTLD_DEFAULT, "iwemu_shim_uverbs_file"));
    return fn ? fn(cmd_fd) : 0;
}

int setup_context(Context* ctx, uint64_t file, int* async_reader)
{
    ctx->async_writer = -1;
    ctx->objects = nullptr;
    // SEQPACKET keeps the 16-byte async event records whole.
    int sv[2];
    if (socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, sv) != 0) {
        int err = errno;
        verbs_uninit_context(&ctx->vctx);
        free(ctx);
        return err;
    }
    fcntl(sv[1], F_SETFL, fcntl(sv[1], F_GETFL) | O_NONBLOCK);
    shutdown(sv[0], SHUT_WR);
    *async_reader = sv[0];
    ctx->async_writer = sv[1];
    ctx->vctx.context.num_comp_vectors = 1;

    verbs_set_ops(&ctx->vctx, &kContextOps);
    verbs_set_ops(&ctx->vctx, &kQueryOps);
    for (const verbs_context_ops* ops : {&kPdMrOps, &kMwOps, &kCqOps, &kCqExOps, &kSrqOps, &kQpOps,
                                         &kParentDomainOps, &kOdpOps, &kImportOps})
        verbs_set_ops(&ctx->vctx, ops);
    register_context(ctx, file);
    return 0;
}

void post_async_event(Context* ctx, uint64_t element, ibv_event_type type)
{
    // struct ib_uverbs_async_event_desc
    struct {
        uint64_t element;
        uint32_t event_type;
        uint32_t reserved;
    } desc{element, static_cast<uint32_t>(type), 0};
    static_assert(sizeof desc == 16);
    if (ctx->async_writer >= 0) send(ctx->async_writer, &desc, sizeof desc, MSG_DONTWAIT | MSG_NOSIGNAL);
}

}  // namespace iwemu::provider
