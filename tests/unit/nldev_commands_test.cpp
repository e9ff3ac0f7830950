// kmod-shim/nldev_commands.cpp against a fixed backend: the replies'
// framing (types, flags, seq, port id, multi-part dumps, acks), the
// kernel's errnos for bad requests, and random / truncated input that must
// yield well-formed replies or none, never a crash.
#include <linux/netlink.h>
#include <netlink/attr.h>
#include <netlink/msg.h>
#include <rdma/rdma_netlink.h>

#include <gtest/gtest.h>

#include <cerrno>
#include <cstring>
#include <random>

#include "kmod-shim/nldev_commands.h"

namespace iwemu::shim {
namespace {

class FixedBackend final : public NldevBackend {
public:
    std::vector<NldevDevice> devices() override
    {
        NldevDevice a;
        a.index = 0;
        a.name = "iwemu0";
        a.node_guid = 0x0269776d75000001ull;
        a.netdev = "lo";
        a.netdev_index = 1;
        NldevDevice b = a;
        b.index = 1;
        b.name = "iwemu1";
        b.user_added = true;
        return {a, b};
    }
    ResourceSnapshot resources(uint32_t index) override
    {
        ResourceSnapshot s;
        if (index != 0) return s;
        for (uint32_t i = 0; i < qps; ++i) s.qps.push_back({100 + i, 1, 3, 0, {}});
        s.pds.push_back({1, qps});
        s.port.tx_bytes = 4242;
        return s;
    }
    std::vector<NldevCmId> cm_ids(uint32_t) override { return {}; }
    uint32_t pid() override { return 77; }
    int link_add(const std::string& name, const std::string& type, const std::string& netdev) override
    {
        added = name + "/" + type + "/" + netdev;
        return 0;
    }
    int link_delete(uint32_t index) override
    {
        deleted = static_cast<int>(index);
        return 0;
    }
    uint32_t qps = 3;
    std::string added;
    int deleted = -1;
};

struct Req {
    std::vector<uint8_t> bytes;
    explicit Req(uint16_t op, uint16_t flags = 0, uint32_t seq = 9)
    {
        bytes.resize(NLMSG_HDRLEN);
        auto* h = hdr();
        h->nlmsg_type = RDMA_NL_GET_TYPE(RDMA_NL_NLDEV, op);
        h->nlmsg_flags = NLM_F_REQUEST | flags;
        h->nlmsg_seq = seq;
        h->nlmsg_len = NLMSG_HDRLEN;
    }
    nlmsghdr* hdr() { return reinterpret_cast<nlmsghdr*>(bytes.data()); }
    Req& u32(uint16_t type, uint32_t v)
    {
        return raw(type, &v, 4);
    }
    Req& str(uint16_t type, const std::string& s) { return raw(type, s.c_str(), s.size() + 1); }
    Req& raw(uint16_t type, const void* p, size_t n)
    {
        nlattr a{static_cast<uint16_t>(NLA_HDRLEN + n), type};
        const auto* ap = reinterpret_cast<const uint8_t*>(&a);
        bytes.insert(bytes.end(), ap, ap + NLA_HDRLEN);
        const auto* d = static_cast<const uint8_t*>(p);
        bytes.insert(bytes.end(), d, d + n);
        bytes.resize(NLMSG_ALIGN(bytes.size()));
        hdr()->nlmsg_len = static_cast<uint32_t>(bytes.size());
        return *this;
    }
};

std::vector<std::vector<uint8_t>> answer(Req& r, NldevBackend& b)
{
    return nldev_answer(r.bytes.data(), r.bytes.size(), 4711, b);
}

const nlmsghdr* H(const std::vector<uint8_t>& d) { return reinterpret_cast<const nlmsghdr*>(d.data()); }
int error_of(const std::vector<uint8_t>& d) { return -static_cast<const nlmsgerr*>(NLMSG_DATA(H(d)))->error; }

TEST(NldevCommands, DumpOfDevicesIsMultiPartAndEndsWithDone)
{
    FixedBackend b;
    Req r(RDMA_NLDEV_CMD_GET, NLM_F_DUMP);
    auto out = answer(r, b);
    ASSERT_EQ(out.size(), 3u);
    for (int i = 0; i < 2; ++i) {
        EXPECT_EQ(H(out[i])->nlmsg_type, RDMA_NL_GET_TYPE(RDMA_NL_NLDEV, RDMA_NLDEV_CMD_GET));
        EXPECT_TRUE(H(out[i])->nlmsg_flags & NLM_F_MULTI);
        EXPECT_EQ(H(out[i])->nlmsg_seq, 9u);
        EXPECT_EQ(H(out[i])->nlmsg_pid, 4711u);
    }
    EXPECT_EQ(H(out[2])->nlmsg_type, NLMSG_DONE);
}

TEST(NldevCommands, DoitWithAckGetsReplyThenAckZero)
{
    FixedBackend b;
    Req r(RDMA_NLDEV_CMD_PORT_GET, NLM_F_ACK);
    r.u32(RDMA_NLDEV_ATTR_DEV_INDEX, 1).u32(RDMA_NLDEV_ATTR_PORT_INDEX, 1);
    auto out = answer(r, b);
    ASSERT_EQ(out.size(), 2u);
    EXPECT_EQ(H(out[0])->nlmsg_flags & NLM_F_MULTI, 0);
    EXPECT_EQ(H(out[1])->nlmsg_type, NLMSG_ERROR);
    EXPECT_EQ(error_of(out[1]), 0);
}

TEST(NldevCommands, LargeTablesSplitOverMessagesWithinAPage)
{
    FixedBackend b;
    b.qps = 100;
    Req r(RDMA_NLDEV_CMD_RES_QP_GET, NLM_F_DUMP);
    r.u32(RDMA_NLDEV_ATTR_DEV_INDEX, 0);
    auto out = answer(r, b);
    ASSERT_GE(out.size(), 3u);
    for (auto& d : out) EXPECT_LE(d.size(), kNldevMaxReply);
    EXPECT_EQ(H(out.back())->nlmsg_type, NLMSG_DONE);
    b.qps = 0;  // no objects: no table message at all, only DONE
    out = answer(r, b);
    ASSERT_EQ(out.size(), 1u);
    EXPECT_EQ(H(out[0])->nlmsg_type, NLMSG_DONE);
}

struct ErrCase {
    const char* what;
    Req req;
    int err;
};

TEST(NldevCommands, QpCountersDumpOneCounterPerQpWithinAPage)
{
    FixedBackend b;
    b.qps = 20;
    Req r(RDMA_NLDEV_CMD_STAT_GET, NLM_F_DUMP);
    r.u32(RDMA_NLDEV_ATTR_DEV_INDEX, 0).u32(RDMA_NLDEV_ATTR_PORT_INDEX, 1).u32(RDMA_NLDEV_ATTR_STAT_RES, RDMA_NLDEV_ATTR_RES_QP);
    auto out = answer(r, b);
    ASSERT_GE(out.size(), 2u);
    EXPECT_EQ(H(out.back())->nlmsg_type, NLMSG_DONE);
    size_t counters = 0;
    for (size_t i = 0; i + 1 < out.size(); ++i) {
        EXPECT_LE(out[i].size(), kNldevMaxReply);
        nlattr* tb[RDMA_NLDEV_ATTR_MAX] = {};
        ASSERT_EQ(nlmsg_parse(const_cast<nlmsghdr*>(H(out[i])), 0, tb, RDMA_NLDEV_ATTR_MAX - 1, nullptr), 0);
        ASSERT_NE(tb[RDMA_NLDEV_ATTR_STAT_COUNTER], nullptr);
        nlattr* e;
        int rem;
        nla_for_each_nested(e, tb[RDMA_NLDEV_ATTR_STAT_COUNTER], rem) {
            nlattr* f[RDMA_NLDEV_ATTR_MAX] = {};
            ASSERT_EQ(nla_parse_nested(f, RDMA_NLDEV_ATTR_MAX - 1, e, nullptr), 0);
            ASSERT_NE(f[RDMA_NLDEV_ATTR_STAT_COUNTER_ID], nullptr);
            ASSERT_NE(f[RDMA_NLDEV_ATTR_STAT_HWCOUNTERS], nullptr);
            ASSERT_NE(f[RDMA_NLDEV_ATTR_RES_QP], nullptr);
            EXPECT_EQ(nla_get_u32(f[RDMA_NLDEV_ATTR_RES_PID]), 77u);
            ++counters;
        }
    }
    EXPECT_EQ(counters, 20u);
    Req mr(RDMA_NLDEV_CMD_STAT_GET, NLM_F_DUMP);
    mr.u32(RDMA_NLDEV_ATTR_DEV_INDEX, 0).u32(RDMA_NLDEV_ATTR_STAT_RES, RDMA_NLDEV_ATTR_RES_MR);
    out = answer(mr, b);
    ASSERT_EQ(out.size(), 1u);
    EXPECT_EQ(error_of(out[0]), EOPNOTSUPP);  // no MR counters
}

TEST(NldevCommands, KernelErrnos)
{
    FixedBackend b;
    std::vector<ErrCase> cases = {
        {"GET of an unknown device", Req(RDMA_NLDEV_CMD_GET).u32(RDMA_NLDEV_ATTR_DEV_INDEX, 9), EINVAL},
        {"GET doit without a device", Req(RDMA_NLDEV_CMD_GET), EINVAL},
        {"PORT_GET of port 2", Req(RDMA_NLDEV_CMD_PORT_GET).u32(RDMA_NLDEV_ATTR_DEV_INDEX, 0).u32(RDMA_NLDEV_ATTR_PORT_INDEX, 2), EINVAL},
        {"resource dump without a device", Req(RDMA_NLDEV_CMD_RES_QP_GET, NLM_F_DUMP), EINVAL},
        {"QP doit of an unknown QP", Req(RDMA_NLDEV_CMD_RES_QP_GET).u32(RDMA_NLDEV_ATTR_DEV_INDEX, 0).u32(RDMA_NLDEV_ATTR_RES_LQPN, 5), ENOENT},
        {"op beyond the table", Req(RDMA_NLDEV_NUM_OPS + 3), EINVAL},
        {"op 0", Req(RDMA_NLDEV_CMD_UNSPEC), EINVAL},
        {"SET (rename)", Req(RDMA_NLDEV_CMD_SET).u32(RDMA_NLDEV_ATTR_DEV_INDEX, 0), EOPNOTSUPP},
        {"GET_CHARDEV of an unknown client", Req(RDMA_NLDEV_CMD_GET_CHARDEV).str(RDMA_NLDEV_ATTR_CHARDEV_TYPE, "umad"), EOPNOTSUPP},
        {"DEV_INDEX of the wrong size", Req(RDMA_NLDEV_CMD_GET).raw(RDMA_NLDEV_ATTR_DEV_INDEX, "\1", 1), EINVAL},
        {"NEWLINK without a netdev", Req(RDMA_NLDEV_CMD_NEWLINK).str(RDMA_NLDEV_ATTR_DEV_NAME, "x").str(RDMA_NLDEV_ATTR_LINK_TYPE, "iwemu"), EINVAL},
        {"DELLINK of the built-in device", Req(RDMA_NLDEV_CMD_DELLINK).u32(RDMA_NLDEV_ATTR_DEV_INDEX, 0), EINVAL},
        {"STAT_GET dump without a resource", Req(RDMA_NLDEV_CMD_STAT_GET, NLM_F_DUMP), EINVAL},
    };
    for (auto& c : cases) {
        auto out = answer(c.req, b);
        ASSERT_EQ(out.size(), 1u) << c.what;
        EXPECT_EQ(H(out[0])->nlmsg_type, NLMSG_ERROR) << c.what;
        EXPECT_EQ(error_of(out[0]), c.err) << c.what;
        // An error echoes the whole request.
        EXPECT_EQ(H(out[0])->nlmsg_len, NLMSG_HDRLEN + sizeof(nlmsgerr) + c.req.bytes.size() - NLMSG_HDRLEN) << c.what;
    }
}

TEST(NldevCommands, LinkAddAndDeleteReachTheBackend)
{
    FixedBackend b;
    Req add(RDMA_NLDEV_CMD_NEWLINK, NLM_F_ACK);
    add.str(RDMA_NLDEV_ATTR_DEV_NAME, "iwemu3").str(RDMA_NLDEV_ATTR_LINK_TYPE, "iwemu").str(RDMA_NLDEV_ATTR_NDEV_NAME, "lo");
    auto out = answer(add, b);
    ASSERT_EQ(out.size(), 1u);
    EXPECT_EQ(error_of(out[0]), 0);
    EXPECT_EQ(b.added, "iwemu3/iwemu/lo");
    Req del(RDMA_NLDEV_CMD_DELLINK, NLM_F_ACK);
    del.u32(RDMA_NLDEV_ATTR_DEV_INDEX, 1);
    out = answer(del, b);
    ASSERT_EQ(out.size(), 1u);
    EXPECT_EQ(error_of(out[0]), 0);
    EXPECT_EQ(b.deleted, 1);
}

TEST(NldevCommands, NonRequestsAndControlMessagesAreIgnored)
{
    FixedBackend b;
    Req r(RDMA_NLDEV_CMD_GET, NLM_F_DUMP);
    r.hdr()->nlmsg_flags &= ~NLM_F_REQUEST;
    EXPECT_TRUE(answer(r, b).empty());
    Req noop(0);
    noop.hdr()->nlmsg_type = NLMSG_NOOP;
    EXPECT_TRUE(answer(noop, b).empty());
}

TEST(NldevCommands, RandomInputGivesWellFormedRepliesOrNone)
{
    FixedBackend b;
    std::mt19937 rng(2027);
    for (int i = 0; i < 20000; ++i) {
        std::vector<uint8_t> buf(rng() % 160);
        for (auto& c : buf) c = static_cast<uint8_t>(rng());
        if (buf.size() >= NLMSG_HDRLEN && rng() % 2) {  // mostly-plausible headers reach the parser
            auto* h = reinterpret_cast<nlmsghdr*>(buf.data());
            h->nlmsg_len = static_cast<uint32_t>(rng() % 3 ? buf.size() : rng() % 400);
            h->nlmsg_type = RDMA_NL_GET_TYPE(rng() % 8, rng() % 30);
            h->nlmsg_flags |= NLM_F_REQUEST;
        }
        for (auto& d : nldev_answer(buf.data(), buf.size(), 1, b)) {
            ASSERT_GE(d.size(), NLMSG_HDRLEN);
            ASSERT_EQ(H(d)->nlmsg_len, d.size());
            ASSERT_LE(d.size(), kNldevMaxReply + 200);  // an error echoes at most the 160-octet request
        }
    }
}

}  // namespace
}  // namespace iwemu::shim
