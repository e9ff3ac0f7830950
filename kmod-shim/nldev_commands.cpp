#include "kmod-shim/nldev_commands.h"

#include <linux/netlink.h>
#include <netlink/attr.h>
#include <netlink/msg.h>
#include <rdma/rdma_netlink.h>
#include <sys/sysmacros.h>

#include <cerrno>
#include <cstring>
#include <algorithm>
#include <climits>
#include <memory>
#include <new>
#include <stdexcept>

#include "kmod-shim/sysfs_tree.h"

namespace iwemu::shim {
namespace {

constexpr uint8_t kNodeTypeRnic = 4;  // RDMA_NODE_RNIC
constexpr uint8_t kQpTypeRc = 2;      // IB_QPT_RC
constexpr uint32_t kUverbsMajor = 231, kUverbsMinorBase = 192;  // dev_nodes.cpp's stat answers
constexpr uint32_t kMiscMajor = 10, kRdmaCmMinor = 58;
constexpr size_t kEntriesPerMessage = 16;  // nested entries per dump part: well under kNldevMaxReply
constexpr size_t kCountersPerMessage = 3;  // a QP counter carries ~17 named values (~800 octets)

// What the requester's attributes may be (type and minimum length); the
// rest are ignored, as nldev's lenient nlmsg_parse_deprecated does.
nla_policy* request_policy()
{
    static nla_policy* const table = [] {
        static nla_policy q[RDMA_NLDEV_ATTR_MAX]{};
        for (int a : {RDMA_NLDEV_ATTR_DEV_INDEX, RDMA_NLDEV_ATTR_PORT_INDEX, RDMA_NLDEV_ATTR_RES_LQPN,
                      RDMA_NLDEV_ATTR_RES_CQN, RDMA_NLDEV_ATTR_RES_MRN, RDMA_NLDEV_ATTR_RES_PDN,
                      RDMA_NLDEV_ATTR_RES_CM_IDN, RDMA_NLDEV_ATTR_STAT_RES, RDMA_NLDEV_ATTR_STAT_COUNTER_ID})
            q[a].type = NLA_U32;
        for (int a : {RDMA_NLDEV_ATTR_DEV_NAME, RDMA_NLDEV_ATTR_LINK_TYPE, RDMA_NLDEV_ATTR_NDEV_NAME,
                      RDMA_NLDEV_ATTR_CHARDEV_TYPE}) {
            q[a].type = NLA_NUL_STRING;
            q[a].maxlen = 64;  // IB_DEVICE_NAME_MAX; longer names are EINVAL
        }
        return q;
    }();
    return table;
}

struct MsgDeleter {
    void operator()(nl_msg* m) const { nlmsg_free(m); }
};
using Msg = std::unique_ptr<nl_msg, MsgDeleter>;

// One request being answered: its header, parsed attributes and the replies so far.
class Reply {
public:
    Reply(const nlmsghdr* req, uint32_t port_id, std::vector<std::vector<uint8_t>>& out)
        : req_(req), port_id_(port_id), out_(out)
    {
    }
    bool dump() const { return req_->nlmsg_flags & NLM_F_DUMP; }

    // A reply message of the request's command type (NLM_F_MULTI in dumps).
    nl_msg* start()
    {
        msg_.reset(nlmsg_alloc_size(kNldevMaxReply));
        if (!msg_) throw std::bad_alloc();
        if (!nlmsg_put(msg_.get(), port_id_, req_->nlmsg_seq, req_->nlmsg_type, 0, dump() ? NLM_F_MULTI : 0))
            throw std::bad_alloc();
        return msg_.get();
    }
    void finish()
    {
        const nlmsghdr* h = nlmsg_hdr(msg_.get());
        const auto* p = reinterpret_cast<const uint8_t*>(h);
        out_.emplace_back(p, p + h->nlmsg_len);
        msg_.reset();
    }
    void done()
    {
        nl_msg* m = nlmsg_alloc_size(64);
        Msg owner(m);
        nlmsghdr* h = nlmsg_put(m, port_id_, req_->nlmsg_seq, NLMSG_DONE, sizeof(int), NLM_F_MULTI);
        std::memset(nlmsg_data(h), 0, sizeof(int));
        const auto* p = reinterpret_cast<const uint8_t*>(h);
        out_.emplace_back(p, p + h->nlmsg_len);
    }
    // netlink_ack(): the request's header (and on error its payload) behind the errno.
    void ack(int err)
    {
        const bool capped = err == 0;
        const size_t payload = sizeof(nlmsgerr) + (capped ? 0 : req_->nlmsg_len - NLMSG_HDRLEN);
        std::vector<uint8_t> d(NLMSG_HDRLEN + payload);
        auto* h = reinterpret_cast<nlmsghdr*>(d.data());
        h->nlmsg_len = static_cast<uint32_t>(d.size());
        h->nlmsg_type = NLMSG_ERROR;
        h->nlmsg_flags = capped ? NLM_F_CAPPED : 0;
        h->nlmsg_seq = req_->nlmsg_seq;
        h->nlmsg_pid = port_id_;
        auto* e = static_cast<nlmsgerr*>(NLMSG_DATA(h));
        e->error = -err;
        std::memcpy(&e->msg, req_, capped ? NLMSG_HDRLEN : req_->nlmsg_len);
        out_.push_back(std::move(d));
    }

private:
    const nlmsghdr* req_;
    uint32_t port_id_;
    std::vector<std::vector<uint8_t>>& out_;
    Msg msg_;
};

// nla_put* failing means the fixed-size reply overflowed: a bug here, never input.
void check(int rc)
{
    if (rc < 0) throw std::length_error("nldev reply overflow");
}

void put_handle(nl_msg* m, const NldevDevice& d)
{
    check(nla_put_u32(m, RDMA_NLDEV_ATTR_DEV_INDEX, d.index));
    check(nla_put_string(m, RDMA_NLDEV_ATTR_DEV_NAME, d.name.c_str()));
}

// nldev.c fill_dev_info()
void put_device(nl_msg* m, const NldevDevice& d)
{
    put_handle(m, d);
    check(nla_put_u32(m, RDMA_NLDEV_ATTR_PORT_INDEX, 1));  // the number of ports
    check(nla_put_u64(m, RDMA_NLDEV_ATTR_CAP_FLAGS, d.cap_flags));
    if (!d.fw_ver.empty()) check(nla_put_string(m, RDMA_NLDEV_ATTR_FW_VERSION, d.fw_ver.c_str()));
    check(nla_put_u64(m, RDMA_NLDEV_ATTR_NODE_GUID, d.node_guid));
    check(nla_put_u64(m, RDMA_NLDEV_ATTR_SYS_IMAGE_GUID, d.node_guid));
    check(nla_put_u8(m, RDMA_NLDEV_ATTR_DEV_NODE_TYPE, kNodeTypeRnic));
    check(nla_put_u8(m, RDMA_NLDEV_ATTR_DEV_DIM, 0));
    check(nla_put_string(m, RDMA_NLDEV_ATTR_DEV_PROTOCOL, "iw"));
}

// nldev.c fill_port_info(): no LID / SM / subnet prefix on an iWARP port.
void put_port(nl_msg* m, const NldevDevice& d)
{
    put_handle(m, d);
    check(nla_put_u32(m, RDMA_NLDEV_ATTR_PORT_INDEX, 1));
    check(nla_put_u64(m, RDMA_NLDEV_ATTR_CAP_FLAGS, d.port_cap_flags));
    check(nla_put_u8(m, RDMA_NLDEV_ATTR_PORT_STATE, d.port_state));
    check(nla_put_u8(m, RDMA_NLDEV_ATTR_PORT_PHYS_STATE, d.port_phys_state));
    if (!d.netdev.empty() && d.netdev_index) {
        check(nla_put_u32(m, RDMA_NLDEV_ATTR_NDEV_INDEX, d.netdev_index));
        check(nla_put_string(m, RDMA_NLDEV_ATTR_NDEV_NAME, d.netdev.c_str()));
    }
}

void put_summary(nl_msg* m, const NldevDevice& d, const ResourceSnapshot& r, size_t cm_ids, size_t contexts)
{
    put_handle(m, d);
    nlattr* table = nla_nest_start(m, RDMA_NLDEV_ATTR_RES_SUMMARY);
    const std::pair<const char*, uint64_t> rows[] = {
        {"pd", r.pds.size()}, {"cq", r.cqs.size()}, {"qp", r.qps.size()}, {"cm_id", cm_ids},
        {"mr", r.mrs.size()}, {"ctx", contexts},    {"srq", r.srqs},
    };
    for (const auto& [name, count] : rows) {
        nlattr* e = nla_nest_start(m, RDMA_NLDEV_ATTR_RES_SUMMARY_ENTRY);
        check(nla_put_string(m, RDMA_NLDEV_ATTR_RES_SUMMARY_ENTRY_NAME, name));
        check(nla_put_u64(m, RDMA_NLDEV_ATTR_RES_SUMMARY_ENTRY_CURR, count));
        nla_nest_end(m, e);
    }
    nla_nest_end(m, table);
}

void put_qp(nl_msg* m, const ResourceSnapshot::Qp& q, uint32_t pid)
{
    if (q.state != 0) check(nla_put_u32(m, RDMA_NLDEV_ATTR_PORT_INDEX, 1));  // the port is set at INIT
    check(nla_put_u32(m, RDMA_NLDEV_ATTR_RES_LQPN, q.qp_num));
    check(nla_put_u32(m, RDMA_NLDEV_ATTR_RES_SQ_PSN, 0));  // iWARP has no PSNs
    check(nla_put_u8(m, RDMA_NLDEV_ATTR_RES_TYPE, kQpTypeRc));
    check(nla_put_u8(m, RDMA_NLDEV_ATTR_RES_STATE, q.state));
    check(nla_put_u32(m, RDMA_NLDEV_ATTR_RES_PID, q.pid ? q.pid : pid));  // another process's QP: its pid
    check(nla_put_u32(m, RDMA_NLDEV_ATTR_RES_PDN, q.pdn));
}

void put_cq(nl_msg* m, const ResourceSnapshot::Cq& c, uint32_t pid)
{
    check(nla_put_u32(m, RDMA_NLDEV_ATTR_RES_CQE, c.cqe));
    check(nla_put_u64(m, RDMA_NLDEV_ATTR_RES_USECNT, c.users));
    check(nla_put_u32(m, RDMA_NLDEV_ATTR_RES_PID, pid));
    check(nla_put_u32(m, RDMA_NLDEV_ATTR_RES_CQN, c.cqn));
}

void put_mr(nl_msg* m, const ResourceSnapshot::Mr& r, uint32_t pid)
{
    check(nla_put_u32(m, RDMA_NLDEV_ATTR_RES_RKEY, r.stag));
    check(nla_put_u32(m, RDMA_NLDEV_ATTR_RES_LKEY, r.stag));
    check(nla_put_u64(m, RDMA_NLDEV_ATTR_RES_IOVA, r.iova));
    check(nla_put_u64(m, RDMA_NLDEV_ATTR_RES_MRLEN, r.length));
    check(nla_put_u32(m, RDMA_NLDEV_ATTR_RES_PID, pid));
    check(nla_put_u32(m, RDMA_NLDEV_ATTR_RES_MRN, r.stag >> 8));  // the STag's index
    check(nla_put_u32(m, RDMA_NLDEV_ATTR_RES_PDN, r.pdn));
}

void put_pd(nl_msg* m, const ResourceSnapshot::Pd& p, uint32_t pid)
{
    check(nla_put_u64(m, RDMA_NLDEV_ATTR_RES_USECNT, p.users));
    check(nla_put_u32(m, RDMA_NLDEV_ATTR_RES_PID, pid));
    check(nla_put_u32(m, RDMA_NLDEV_ATTR_RES_PDN, p.pdn));
}

size_t address_size(const sockaddr_storage& a)
{
    return a.ss_family == AF_INET ? sizeof(sockaddr_in) : a.ss_family == AF_INET6 ? sizeof(sockaddr_in6) : 0;
}

void put_cm_id(nl_msg* m, const NldevCmId& c, uint32_t pid)
{
    check(nla_put_u32(m, RDMA_NLDEV_ATTR_PORT_INDEX, 1));
    if (c.qp_num) check(nla_put_u32(m, RDMA_NLDEV_ATTR_RES_LQPN, c.qp_num));
    check(nla_put_u32(m, RDMA_NLDEV_ATTR_RES_PS, c.ps));
    check(nla_put_u8(m, RDMA_NLDEV_ATTR_RES_TYPE, kQpTypeRc));
    check(nla_put_u8(m, RDMA_NLDEV_ATTR_RES_STATE, c.state));
    if (size_t n = address_size(c.src)) check(nla_put(m, RDMA_NLDEV_ATTR_RES_SRC_ADDR, static_cast<int>(sizeof c.src), &c.src)), (void)n;
    if (size_t n = address_size(c.dst)) check(nla_put(m, RDMA_NLDEV_ATTR_RES_DST_ADDR, static_cast<int>(sizeof c.dst), &c.dst)), (void)n;
    check(nla_put_u32(m, RDMA_NLDEV_ATTR_RES_PID, pid));
    check(nla_put_u32(m, RDMA_NLDEV_ATTR_RES_CM_IDN, c.id));
}

// A resource table (RES_QP { RES_QP_ENTRY {...} ... }) in as many messages
// as it takes, kEntriesPerMessage entries each (a doit: exactly one entry).
template <typename T, typename Put>
void put_table(Reply& r, const NldevDevice& d, int table_attr, int entry_attr, const std::vector<T>& items, Put put,
               size_t per_message = kEntriesPerMessage)
{
    // No objects: no message at all, only NLMSG_DONE (res_get_common_dumpit).
    size_t i = 0;
    if (items.empty()) return;
    do {
        nl_msg* m = r.start();
        put_handle(m, d);
        nlattr* table = nla_nest_start(m, table_attr);
        for (size_t n = 0; n < per_message && i < items.size(); ++n, ++i) {
            nlattr* e = nla_nest_start(m, entry_attr);
            put(m, items[i]);
            nla_nest_end(m, e);
        }
        nla_nest_end(m, table);
        r.finish();
    } while (i < items.size());
}

// STAT_HWCOUNTERS { ENTRY { NAME, VALUE } ... } (fill_stat_counter_hwcounters)
void put_hwcounters(nl_msg* m, const CounterValues& c)
{
    nlattr* table = nla_nest_start(m, RDMA_NLDEV_ATTR_STAT_HWCOUNTERS);
    for (const auto& [name, value] : hw_counter_list(c)) {
        nlattr* e = nla_nest_start(m, RDMA_NLDEV_ATTR_STAT_HWCOUNTER_ENTRY);
        check(nla_put_string(m, RDMA_NLDEV_ATTR_STAT_HWCOUNTER_ENTRY_NAME, name.c_str()));
        check(nla_put_u64(m, RDMA_NLDEV_ATTR_STAT_HWCOUNTER_ENTRY_VALUE, value));
        nla_nest_end(m, e);
    }
    nla_nest_end(m, table);
}

// The port's counters (rdma statistic show): sums over the QPs of every iwemu process.
void put_counters(nl_msg* m, const NldevDevice& d, const ResourceSnapshot& s)
{
    put_handle(m, d);
    check(nla_put_u32(m, RDMA_NLDEV_ATTR_PORT_INDEX, 1));
    put_hwcounters(m, s.port);
}

// One QP's counter (rdma statistic qp show), as fill_res_counter_entry()
// shows a counter that auto mode bound to one QP: its id, mode, the QP, values.
void put_qp_counter(nl_msg* m, uint32_t id, const ResourceSnapshot::Qp& q, uint32_t pid)
{
    check(nla_put_u32(m, RDMA_NLDEV_ATTR_PORT_INDEX, 1));
    check(nla_put_u32(m, RDMA_NLDEV_ATTR_STAT_COUNTER_ID, id));
    check(nla_put_u32(m, RDMA_NLDEV_ATTR_STAT_MODE, RDMA_COUNTER_MODE_AUTO));
    check(nla_put_u8(m, RDMA_NLDEV_ATTR_RES_TYPE, kQpTypeRc));
    nlattr* qps = nla_nest_start(m, RDMA_NLDEV_ATTR_RES_QP);
    nlattr* e = nla_nest_start(m, RDMA_NLDEV_ATTR_RES_QP_ENTRY);
    check(nla_put_u32(m, RDMA_NLDEV_ATTR_RES_LQPN, q.qp_num));
    nla_nest_end(m, e);
    nla_nest_end(m, qps);
    put_hwcounters(m, q.counters);
    check(nla_put_u32(m, RDMA_NLDEV_ATTR_RES_PID, q.pid ? q.pid : pid));
}

// huge_encode_dev(): how the kernel puts a dev_t in RDMA_NLDEV_ATTR_CHARDEV.
uint64_t huge_encode_dev(uint32_t maj, uint32_t min)
{
    return (min & 0xff) | (uint64_t{maj} << 8) | (uint64_t{min & ~0xffu} << 12);
}

class Request {
public:
    Request(nlmsghdr* h, uint32_t port_id, NldevBackend& b, std::vector<std::vector<uint8_t>>& out)
        : h_(h), reply_(h, port_id, out), backend_(b)
    {
    }

    // 0 (answered; ack if asked) or the errno of the NLMSG_ERROR.
    int run()
    {
        if (nlmsg_parse(h_, 0, tb_, RDMA_NLDEV_ATTR_MAX - 1, request_policy()) < 0) return EINVAL;
        const unsigned op = RDMA_NL_GET_OP(h_->nlmsg_type);
        const bool dump = reply_.dump();
        switch (op) {
        case RDMA_NLDEV_CMD_GET:
            return dump ? dump_devices() : get_device();
        case RDMA_NLDEV_CMD_PORT_GET:
            return dump ? dump_ports() : get_port();
        case RDMA_NLDEV_CMD_SYS_GET:
            return sys_get();
        case RDMA_NLDEV_CMD_RES_GET:
            return res_summary(dump);
        case RDMA_NLDEV_CMD_RES_QP_GET:
        case RDMA_NLDEV_CMD_RES_CM_ID_GET:
        case RDMA_NLDEV_CMD_RES_CQ_GET:
        case RDMA_NLDEV_CMD_RES_MR_GET:
        case RDMA_NLDEV_CMD_RES_PD_GET:
            return resource(op, dump);
        case RDMA_NLDEV_CMD_GET_CHARDEV:
            return dump ? EOPNOTSUPP : get_chardev();
        case RDMA_NLDEV_CMD_STAT_GET:
            return stat_get(dump);
        case RDMA_NLDEV_CMD_NEWLINK:
            return new_link();
        case RDMA_NLDEV_CMD_DELLINK:
            return del_link();
        case RDMA_NLDEV_CMD_SET:
        case RDMA_NLDEV_CMD_SYS_SET:
        case RDMA_NLDEV_CMD_STAT_SET:
        case RDMA_NLDEV_CMD_STAT_DEL:
        case RDMA_NLDEV_CMD_RES_QP_GET_RAW:
        case RDMA_NLDEV_CMD_RES_CQ_GET_RAW:
        case RDMA_NLDEV_CMD_RES_MR_GET_RAW:
        case RDMA_NLDEV_CMD_RES_CTX_GET:
        case RDMA_NLDEV_CMD_RES_SRQ_GET:
        case RDMA_NLDEV_CMD_STAT_GET_STATUS:
            return EOPNOTSUPP;  // known to ib_core, not offered by iwemu
        default:
            return EINVAL;      // rdma_nl_rcv_msg: no such op
        }
    }
    bool answered_by_dump() const { return dumped_; }
    Reply& reply() { return reply_; }

private:
    bool has(int a) const { return tb_[a] != nullptr; }
    uint32_t u32(int a) const { return nla_get_u32(tb_[a]); }

    // The device DEV_INDEX names; nullptr: missing or unknown (EINVAL, as ib_device_get_by_index).
    const NldevDevice* device()
    {
        if (!has(RDMA_NLDEV_ATTR_DEV_INDEX)) return nullptr;
        devices_ = backend_.devices();
        for (const NldevDevice& d : devices_)
            if (d.index == u32(RDMA_NLDEV_ATTR_DEV_INDEX)) return &d;
        return nullptr;
    }
    bool port_ok() const { return has(RDMA_NLDEV_ATTR_PORT_INDEX) && u32(RDMA_NLDEV_ATTR_PORT_INDEX) == 1; }

    int get_device()
    {
        const NldevDevice* d = device();
        if (!d) return EINVAL;
        put_device(reply_.start(), *d);
        reply_.finish();
        return 0;
    }
    int dump_devices()
    {
        for (const NldevDevice& d : backend_.devices()) {
            put_device(reply_.start(), d);
            reply_.finish();
        }
        return dump_done();
    }
    int get_port()
    {
        const NldevDevice* d = device();
        if (!d || !port_ok()) return EINVAL;
        put_port(reply_.start(), *d);
        reply_.finish();
        return 0;
    }
    int dump_ports()
    {
        const NldevDevice* d = device();
        if (!d) return EINVAL;  // nldev_port_get_dumpit needs the device
        put_port(reply_.start(), *d);
        reply_.finish();
        return dump_done();
    }
    int sys_get()
    {
        nl_msg* m = reply_.start();
        check(nla_put_u8(m, RDMA_NLDEV_SYS_ATTR_NETNS_MODE, 1));  // shared
        // Registered memory is the process's own: a fork()ed child's copy
        // never disturbs the parent's regions (no MADV_DONTFORK needed).
        check(nla_put_u8(m, RDMA_NLDEV_SYS_ATTR_COPY_ON_FORK, 1));
        reply_.finish();
        return reply_.dump() ? dump_done() : 0;
    }
    int res_summary(bool dump)
    {
        if (dump) {
            for (const NldevDevice& d : backend_.devices()) summary_of(d);
            return dump_done();
        }
        const NldevDevice* d = device();
        if (!d) return EINVAL;
        summary_of(*d);
        return 0;
    }
    void summary_of(const NldevDevice& d)
    {
        const ResourceSnapshot s = backend_.resources(d.index);
        const size_t cm = backend_.cm_ids(d.index).size();
        put_summary(reply_.start(), d, s, cm, s.pds.empty() && s.qps.empty() && s.cqs.empty() ? 0 : 1);
        reply_.finish();
    }

    // res_get_common_dumpit / _doit: a dump needs DEV_INDEX; a doit also the object's number.
    int resource(unsigned op, bool dump)
    {
        const NldevDevice* d = device();
        if (!d) return EINVAL;
        const uint32_t pid = backend_.pid();
        ResourceSnapshot s = backend_.resources(d->index);
        auto pick = [&](auto& items, int id_attr, auto id_of) -> int {
            if (dump) return 0;
            if (!has(id_attr)) return EINVAL;
            for (size_t i = 0; i < items.size(); ++i)
                if (id_of(items[i]) == u32(id_attr)) {
                    items = {items[i]};
                    return 0;
                }
            return ENOENT;
        };
        int err = 0;
        switch (op) {
        case RDMA_NLDEV_CMD_RES_QP_GET:
            if ((err = pick(s.qps, RDMA_NLDEV_ATTR_RES_LQPN, [](auto& q) { return q.qp_num; }))) return err;
            put_table(reply_, *d, RDMA_NLDEV_ATTR_RES_QP, RDMA_NLDEV_ATTR_RES_QP_ENTRY, s.qps,
                      [pid](nl_msg* m, auto& q) { put_qp(m, q, pid); });
            break;
        case RDMA_NLDEV_CMD_RES_CQ_GET:
            if ((err = pick(s.cqs, RDMA_NLDEV_ATTR_RES_CQN, [](auto& c) { return c.cqn; }))) return err;
            put_table(reply_, *d, RDMA_NLDEV_ATTR_RES_CQ, RDMA_NLDEV_ATTR_RES_CQ_ENTRY, s.cqs,
                      [pid](nl_msg* m, auto& c) { put_cq(m, c, pid); });
            break;
        case RDMA_NLDEV_CMD_RES_MR_GET:
            if ((err = pick(s.mrs, RDMA_NLDEV_ATTR_RES_MRN, [](auto& r) { return r.stag >> 8; }))) return err;
            put_table(reply_, *d, RDMA_NLDEV_ATTR_RES_MR, RDMA_NLDEV_ATTR_RES_MR_ENTRY, s.mrs,
                      [pid](nl_msg* m, auto& r) { put_mr(m, r, pid); });
            break;
        case RDMA_NLDEV_CMD_RES_PD_GET:
            if ((err = pick(s.pds, RDMA_NLDEV_ATTR_RES_PDN, [](auto& p) { return p.pdn; }))) return err;
            put_table(reply_, *d, RDMA_NLDEV_ATTR_RES_PD, RDMA_NLDEV_ATTR_RES_PD_ENTRY, s.pds,
                      [pid](nl_msg* m, auto& p) { put_pd(m, p, pid); });
            break;
        case RDMA_NLDEV_CMD_RES_CM_ID_GET: {
            std::vector<NldevCmId> ids = backend_.cm_ids(d->index);
            if ((err = pick(ids, RDMA_NLDEV_ATTR_RES_CM_IDN, [](auto& c) { return c.id; }))) return err;
            put_table(reply_, *d, RDMA_NLDEV_ATTR_RES_CM_ID, RDMA_NLDEV_ATTR_RES_CM_ID_ENTRY, ids,
                      [pid](nl_msg* m, auto& c) { put_cm_id(m, c, pid); });
            break;
        }
        }
        return dump ? dump_done() : 0;
    }

    // ib_uverbs / ucma get_nl_info(): the char device, its ABI and name.
    int get_chardev()
    {
        if (!has(RDMA_NLDEV_ATTR_CHARDEV_TYPE)) return EINVAL;
        const std::string type = nla_get_string(tb_[RDMA_NLDEV_ATTR_CHARDEV_TYPE]);
        nl_msg* m;
        if (type == "uverbs") {
            const NldevDevice* d = device();
            if (!d) return EINVAL;
            m = reply_.start();
            check(nla_put_u64(m, RDMA_NLDEV_ATTR_CHARDEV, huge_encode_dev(kUverbsMajor, kUverbsMinorBase + d->index)));
            check(nla_put_u64(m, RDMA_NLDEV_ATTR_CHARDEV_ABI, kDeviceAbiVersion));
            check(nla_put_string(m, RDMA_NLDEV_ATTR_CHARDEV_NAME, ("uverbs" + std::to_string(d->index)).c_str()));
            check(nla_put_u32(m, RDMA_NLDEV_ATTR_UVERBS_DRIVER_ID, 0));  // RDMA_DRIVER_UNKNOWN: matched by name
        } else if (type == "rdma_cm") {
            m = reply_.start();
            check(nla_put_u64(m, RDMA_NLDEV_ATTR_CHARDEV, huge_encode_dev(kMiscMajor, kRdmaCmMinor)));
            check(nla_put_u64(m, RDMA_NLDEV_ATTR_CHARDEV_ABI, kUcmaAbiVersion));
            check(nla_put_string(m, RDMA_NLDEV_ATTR_CHARDEV_NAME, "rdma_cm"));
        } else {
            return EOPNOTSUPP;  // no client of that name
        }
        reply_.finish();
        return 0;
    }

    int stat_get(bool dump)
    {
        if (has(RDMA_NLDEV_ATTR_STAT_RES)) {
            // Per-QP counters: every QP has its own (as auto mode per QP would bind them).
            if (u32(RDMA_NLDEV_ATTR_STAT_RES) != RDMA_NLDEV_ATTR_RES_QP) return EOPNOTSUPP;  // no MR counters
            const NldevDevice* d = device();
            if (!d) return EINVAL;
            if (has(RDMA_NLDEV_ATTR_PORT_INDEX) && !port_ok()) return EINVAL;
            const uint32_t pid = backend_.pid();
            const ResourceSnapshot s = backend_.statistics(d->index);
            std::vector<std::pair<uint32_t, const ResourceSnapshot::Qp*>> counters;
            for (size_t i = 0; i < s.qps.size(); ++i) counters.emplace_back(static_cast<uint32_t>(i + 1), &s.qps[i]);
            if (!dump) {
                if (!has(RDMA_NLDEV_ATTR_STAT_COUNTER_ID)) return EINVAL;
                std::erase_if(counters, [&](auto& c) { return c.first != u32(RDMA_NLDEV_ATTR_STAT_COUNTER_ID); });
                if (counters.empty()) return ENOENT;
            }
            put_table(reply_, *d, RDMA_NLDEV_ATTR_STAT_COUNTER, RDMA_NLDEV_ATTR_STAT_COUNTER_ENTRY, counters,
                      [pid](nl_msg* m, auto& c) { put_qp_counter(m, c.first, *c.second, pid); },
                      kCountersPerMessage);
            return dump ? dump_done() : 0;
        }
        if (dump) return EINVAL;  // nldev_stat_get_dumpit wants STAT_RES
        const NldevDevice* d = device();
        if (!d || !port_ok()) return EINVAL;
        put_counters(reply_.start(), *d, backend_.statistics(d->index));
        reply_.finish();
        return 0;
    }

    int new_link()
    {
        if (!has(RDMA_NLDEV_ATTR_DEV_NAME) || !has(RDMA_NLDEV_ATTR_LINK_TYPE) || !has(RDMA_NLDEV_ATTR_NDEV_NAME))
            return EINVAL;
        const std::string name = nla_get_string(tb_[RDMA_NLDEV_ATTR_DEV_NAME]);
        if (name.empty() || name.find('%') != std::string::npos) return EINVAL;
        return backend_.link_add(name, nla_get_string(tb_[RDMA_NLDEV_ATTR_LINK_TYPE]),
                                 nla_get_string(tb_[RDMA_NLDEV_ATTR_NDEV_NAME]));
    }
    int del_link()
    {
        const NldevDevice* d = device();
        if (!d || !d->user_added) return EINVAL;  // IBK_ALLOW_USER_UNREG: only what `link add` made
        return backend_.link_delete(d->index);
    }

    int dump_done()
    {
        reply_.done();
        dumped_ = true;
        return 0;
    }

    nlmsghdr* h_;
    Reply reply_;
    NldevBackend& backend_;
    nlattr* tb_[RDMA_NLDEV_ATTR_MAX] = {};
    std::vector<NldevDevice> devices_;
    bool dumped_ = false;
};

}  // namespace

std::vector<std::vector<uint8_t>> nldev_answer(const void* buf, size_t len, uint32_t port_id, NldevBackend& backend)
{
    std::vector<std::vector<uint8_t>> out;
    // A private, aligned copy: nlmsg_parse wants a mutable header, and
    // the caller's bytes may be unaligned.
    std::vector<uint32_t> copy((len + 3) / 4);
    if (len) std::memcpy(copy.data(), buf, len);
    auto* h = reinterpret_cast<nlmsghdr*>(copy.data());
    int remaining = static_cast<int>(std::min<size_t>(len, INT32_MAX));
    // netlink_rcv_skb(): stops at the first message that does not fit.
    for (; nlmsg_ok(h, remaining); h = nlmsg_next(h, &remaining)) {
        if (!(h->nlmsg_flags & NLM_F_REQUEST)) continue;  // only requests are answered
        if (h->nlmsg_type < NLMSG_MIN_TYPE) continue;     // control messages: nothing to do
        Request req(h, port_id, backend, out);
        int err;
        if (RDMA_NL_GET_CLIENT(h->nlmsg_type) != RDMA_NL_NLDEV)
            err = EINVAL;  // no other RDMA netlink client is emulated (ls, iwcm: kernel-internal)
        else
            err = req.run();
        if (req.answered_by_dump()) continue;  // a dump ends with NLMSG_DONE, no ack
        if (err || (h->nlmsg_flags & NLM_F_ACK)) req.reply().ack(err);
    }
    return out;
}

}  // namespace iwemu::shim
