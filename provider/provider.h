// The iwemu libibverbs provider: what libibverbs sees of a device and of an
// open context.  Objects handed to libibverbs (ibv_pd, ibv_mr, ibv_cq,
// ibv_qp, ibv_srq) are the first member of a provider struct that points at
// the emulator object behind it (objects.h).
#pragma once

#include <cstdint>
#include <mutex>

#include "provider/pabi34.h"

namespace iwemu::provider {

struct Device {
    verbs_device vdev;      // must be first: libibverbs frees through uninit_device
    uint64_t node_guid = 0;  // host order, from <ibdev>/node_guid
    int gid_count = 1;      // files in <ibdev>/ports/1/gids; == port gid_tbl_len
};

struct ContextObjects;

// Allocated (zeroed) by libibverbs; fields are set in alloc_context.
struct Context {
    // libibverbs locates the verbs_context inside this allocation through the
    // offset passed to _verbs_init_and_alloc_context; ibv_context is its tail.
    verbs_context vctx;
    int async_writer;          // our end of the SOCK_SEQPACKET pair whose other end is context.async_fd
    ContextObjects* objects;   // what the context owns, destroyed when it is closed (context_objects.cpp)
};

inline Device* to_device(ibv_device* dev) { return reinterpret_cast<Device*>(dev); }
inline Context* to_context(ibv_context* ctx)
{
    return reinterpret_cast<Context*>(reinterpret_cast<char*>(ctx) - offsetof(Context, vctx) -
                                      offsetof(verbs_context, context));
}

// Posts one ib_uverbs_async_event_desc on the context's async fd (never
// blocks, never raises SIGPIPE).  element: ibv_qp*/ibv_cq*/ibv_srq* or port.
void post_async_event(Context* ctx, uint64_t element, ibv_event_type type);

// Context bookkeeping (context_objects.cpp): a context receives the async
// events of the objects it created and every port/device event; closing it
// destroys what the application left, as closing a uverbs file does.
// file: the shim's number for the cmd fd's open file (0: none); contexts
// on one file share its objects (objects.h ContextObjects).
void register_context(Context* ctx, uint64_t file);
void unregister_context(Context* ctx);

// Operation tables installed by alloc_context (one per file).
extern const verbs_context_ops kQueryOps;
extern const verbs_context_ops kPdMrOps;
extern const verbs_context_ops kMwOps;
extern const verbs_context_ops kCqOps;
extern const verbs_context_ops kCqExOps;
extern const verbs_context_ops kSrqOps;
extern const verbs_context_ops kQpOps;
extern const verbs_context_ops kParentDomainOps;
extern const verbs_context_ops kOdpOps;
extern const verbs_context_ops kImportOps;

// ibv_import_device (import.cpp): a context on the open file of cmd_fd, a
// copy of another context's cmd fd.
verbs_context* import_context(ibv_device* ibdev, int cmd_fd);
// The shim's number for the open file behind a cmd fd (kmod-shim/
// uverbs_file.h): the same for every dup of it; 0 without the shim.
uint64_t uverbs_file_of(int cmd_fd);
// What alloc_context and import_context share (device.cpp): the async
// event pair, the operation tables, the registration.  0 or an errno; on
// failure the context is uninitialised and freed.
int setup_context(Context* ctx, uint64_t file, int* async_reader);

}  // namespace iwemu::provider
