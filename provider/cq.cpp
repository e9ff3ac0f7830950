// Completion queues and their completion channels.
#include <dlfcn.h>
#include <endian.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <mutex>
#include <new>
#include <unordered_map>

#include "provider/abi_guard.h"
#include "provider/objects.h"

namespace iwemu::provider {
namespace {

using ChannelSenderFn = int (*)(int);

// The shim owns completion channels (it answered CREATE_COMP_CHANNEL); it
// is preloaded, so its symbol is in the global scope (kernel-surface §7.3.30).
int channel_sender_for(ibv_comp_channel* channel)
{
    static auto fn = reinterpret_cast<ChannelSenderFn>(dlsym(RTLD_DEFAULT, "iwemu_shim_comp_channel_sender"));
    if (!fn) {
        errno = EINVAL;
        return -1;
    }
    return fn(channel->fd);
}

// The sender of a channel, shared by all its CQs: one fd pair per channel,
// not per CQ (a thousand CQs on one channel are common).  Keyed by the
// channel; an entry expires with the channel's last CQ (libibverbs refuses
// to destroy a channel that still has CQs), and the pipe's inode tells a new
// channel at a reused address apart while an old handler copy still lives.
// Create/destroy path only.
std::shared_ptr<ChannelSender> sender_of(ibv_comp_channel* channel)
{
    static std::mutex lock;
    static auto* senders = new std::unordered_map<ibv_comp_channel*, std::weak_ptr<ChannelSender>>;
    struct stat st{};
    if (fstat(channel->fd, &st) != 0) return nullptr;
    std::lock_guard g(lock);
    if (auto it = senders->find(channel); it != senders->end())
        if (auto s = it->second.lock(); s && s->pipe == st.st_ino) return s;
    std::erase_if(*senders, [](const auto& e) { return e.second.expired(); });
    int fd = channel_sender_for(channel);
    if (fd < 0) return nullptr;
    const int reader = fcntl(channel->fd, F_DUPFD_CLOEXEC, 0);
    if (reader < 0) {
        const int err = errno;
        close(fd);
        errno = err;
        return nullptr;
    }
    auto s = std::make_shared<ChannelSender>(fd, reader, st.st_ino);
    (*senders)[channel] = s;
    return s;
}

}  // namespace

Cq* make_cq(ibv_context* ctx, int cqe, ibv_comp_channel* channel, int comp_vector)
{
    if (cqe <= 0 || comp_vector < 0 || comp_vector >= ctx->num_comp_vectors) return fail<Cq>(EINVAL);
    std::shared_ptr<ChannelSender> sender;
    if (channel) {
        sender = sender_of(channel);
        if (!sender) return fail<Cq>(errno);
    }
    auto* mem = calloc(1, sizeof(Cq));
    if (!mem) return fail<Cq>(ENOMEM);
    auto* cq = new (mem) Cq{};
    if (int err = emu().create_cq(static_cast<uint32_t>(cqe), &cq->emu)) {
        cq->~Cq();
        free(cq);
        return fail<Cq>(err);
    }
    cq->emu->user_context = cq;
    cq->ibv.cqe = static_cast<int>(cq->emu->capacity());
    cq->ibv.handle = 0;
    if (sender) {
        // One 8-byte ib_uverbs_comp_event_desc per armed completion; the
        // element is the ibv_cq* ibv_get_cq_event hands back.
        const uint64_t handle = reinterpret_cast<uintptr_t>(&cq->ibv);
        // The channel's fd names it for a thread that waits on it (rx_event_waiter.cpp).
        cq->emu->set_event_handler([sender = std::move(sender), handle] { sender->post(handle); }, channel->fd,
                                   handle);
    }
    track(ctx, &ContextObjects::cqs, cq);
    return cq;
}

namespace {

ibv_cq* create_cq(ibv_context* ctx, int cqe, ibv_comp_channel* channel, int comp_vector)
{
    Cq* cq = make_cq(ctx, cqe, channel, comp_vector);
    return cq ? &cq->ibv : nullptr;  // libibverbs runs verbs_init_cq (context, channel, mutex/cond)
}

int destroy_cq(ibv_cq* ibcq)
{
    Cq* cq = to_cq(ibcq);
    if (int err = detach_and_destroy(cq->emu, cq, [](CompletionQueue* c) { return emu().destroy_cq(c); }))
        return err;
    untrack(ibcq->context, &ContextObjects::cqs, cq);
    cq->~Cq();
    free(cq);
    return 0;
}

int poll_cq(ibv_cq* ibcq, int num_entries, ibv_wc* wc)
{
    constexpr int kBatch = 16;
    StackBatch<Completion, kBatch> storage;  // most polls of a spinning application return nothing
    Completion* const c = storage.items;
    int total = 0;
    while (total < num_entries) {
        const int n = to_cq(ibcq)->emu->poll(c, std::min(kBatch, num_entries - total));
        for (int i = 0; i < n; ++i) {
            ibv_wc& w = wc[total + i];
            w.wr_id = c[i].wr_id;
            w.status = static_cast<ibv_wc_status>(c[i].status);
            w.opcode = static_cast<ibv_wc_opcode>(c[i].opcode);
            w.vendor_err = c[i].vendor_err;
            w.byte_len = c[i].byte_len;
            if (c[i].wc_flags & wc_with_imm)
                w.imm_data = htobe32(c[i].imm_data_or_inv_rkey);
            else
                w.invalidated_rkey = c[i].imm_data_or_inv_rkey;
            w.qp_num = c[i].qp_num;
            w.src_qp = c[i].src_qp;
            w.wc_flags = c[i].wc_flags;
            w.pkey_index = 0;
            w.slid = 0;
            w.sl = 0;
            w.dlid_path_bits = 0;
        }
        total += n;
        if (n < kBatch) break;
    }
    return total;
}

// Arming asks for an event on the next completion added (ibv_req_notify_cq(3)),
// as kernel siw and rxe do: completions already in the CQ raise none, so a
// loop that waits, re-arms and then polls once (perftest's ib_read_lat -e)
// gets one event per completion.  A loop must poll after arming to pick up
// what came before the arm.
int req_notify_cq(ibv_cq* ibcq, int solicited_only)
{
    return to_cq(ibcq)->emu->req_notify(solicited_only != 0);
}


void cq_event(ibv_cq*) {}  // libibverbs counts the events (ibv_ack_cq_events)

// ibv_resize_cq: the kernel's checks (1..max_cqe, never below what is
// queued: EINVAL), completions kept in order.
int resize_cq(ibv_cq* ibcq, int cqe)
{
    if (cqe <= 0) return EINVAL;
    Cq* cq = to_cq(ibcq);
    if (int err = cq->emu->resize(static_cast<uint32_t>(cqe))) return err;
    ibcq->cqe = static_cast<int>(cq->emu->capacity());
    return 0;
}

}  // namespace

const verbs_context_ops kCqOps = [] {
    verbs_context_ops ops{};
    ops.create_cq = Guard<create_cq>::call;
    ops.destroy_cq = Guard<destroy_cq>::call;
    ops.poll_cq = Guard<poll_cq>::call;
    ops.req_notify_cq = Guard<req_notify_cq>::call;
    ops.cq_event = Guard<cq_event>::call;
    ops.resize_cq = Guard<resize_cq>::call;
    return ops;
}();

}  // namespace iwemu::provider
