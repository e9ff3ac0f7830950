// Under iwemu-run: the process's own verbs objects are visible through its
// NETLINK_RDMA socket (RES_QP_GET / RES_MR_GET dumps name the QP and MR it
// created), libibverbs found iwemu0 through the path the environment
// selects (netlink: device index 0; IWEMU_NETLINK=off: sysfs, index -1),
// and malformed requests get NLMSG_ERROR or nothing, never a crash or a
// hang.  Requests are packed by hand here on purpose: the test must not
// share the shim's libnl code it checks.
#include <infiniband/verbs.h>
#include <linux/netlink.h>
#include <poll.h>
#include <rdma/rdma_netlink.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <vector>

#define CHECK(c)                                                              \
    do {                                                                      \
        if (!(c)) {                                                           \
            std::fprintf(stderr, "%s:%d: check failed: %s\n", __FILE__, __LINE__, #c); \
            std::exit(1);                                                     \
        }                                                                     \
    } while (0)

namespace {

int nl_open()
{
    int fd = socket(AF_NETLINK, SOCK_RAW | SOCK_CLOEXEC, NETLINK_RDMA);
    CHECK(fd >= 0);
    sockaddr_nl a{};
    a.nl_family = AF_NETLINK;
    CHECK(bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0);
    return fd;
}

void put_u32(std::vector<uint8_t>& m, uint16_t type, uint32_t v)
{
    nlattr a{static_cast<uint16_t>(NLA_HDRLEN + 4), type};
    m.insert(m.end(), reinterpret_cast<uint8_t*>(&a), reinterpret_cast<uint8_t*>(&a) + NLA_HDRLEN);
    m.insert(m.end(), reinterpret_cast<uint8_t*>(&v), reinterpret_cast<uint8_t*>(&v) + 4);
}

std::vector<uint8_t> request(uint16_t op, uint16_t flags, uint32_t seq)
{
    std::vector<uint8_t> m(NLMSG_HDRLEN);
    auto* h = reinterpret_cast<nlmsghdr*>(m.data());
    h->nlmsg_type = RDMA_NL_GET_TYPE(RDMA_NL_NLDEV, op);
    h->nlmsg_flags = NLM_F_REQUEST | flags;
    h->nlmsg_seq = seq;
    return m;
}

void send_msg(int fd, std::vector<uint8_t> m)
{
    reinterpret_cast<nlmsghdr*>(m.data())->nlmsg_len = static_cast<uint32_t>(m.size());
    CHECK(send(fd, m.data(), m.size(), 0) == static_cast<ssize_t>(m.size()));
}

// Every u32 value of attribute `attr` found anywhere (nested tables
// included) in the replies up to NLMSG_DONE / NLMSG_ERROR; *error gets the
// errno of an NLMSG_ERROR.
std::vector<uint32_t> collect(int fd, uint16_t attr, int* error)
{
    std::vector<uint32_t> out;
    *error = 0;
    for (;;) {
        pollfd p{fd, POLLIN, 0};
        CHECK(poll(&p, 1, 5000) == 1);  // a reply, never a hang
        alignas(4) uint8_t buf[8192];
        ssize_t n = recv(fd, buf, sizeof buf, 0);
        CHECK(n > 0);
        for (auto* h = reinterpret_cast<nlmsghdr*>(buf); NLMSG_OK(h, n); h = NLMSG_NEXT(h, n)) {
            if (h->nlmsg_type == NLMSG_DONE) return out;
            if (h->nlmsg_type == NLMSG_ERROR) {
                *error = -static_cast<nlmsgerr*>(NLMSG_DATA(h))->error;
                return out;
            }
            // Walk the attributes, descending into nests.
            std::vector<std::pair<uint8_t*, int>> stack{{static_cast<uint8_t*>(NLMSG_DATA(h)), static_cast<int>(h->nlmsg_len - NLMSG_HDRLEN)}};
            while (!stack.empty()) {
                auto [p0, len] = stack.back();
                stack.pop_back();
                for (auto* a = reinterpret_cast<nlattr*>(p0); len >= NLA_HDRLEN && a->nla_len >= NLA_HDRLEN && a->nla_len <= len;) {
                    uint8_t* data = reinterpret_cast<uint8_t*>(a) + NLA_HDRLEN;
                    const int dlen = a->nla_len - NLA_HDRLEN;
                    if ((a->nla_type & NLA_TYPE_MASK) == attr && dlen == 4) out.push_back(*reinterpret_cast<uint32_t*>(data));
                    else if (dlen >= NLA_HDRLEN) stack.push_back({data, dlen});
                    const int step = NLA_ALIGN(a->nla_len);
                    len -= step;
                    a = reinterpret_cast<nlattr*>(reinterpret_cast<uint8_t*>(a) + step);
                }
            }
            if (!(h->nlmsg_flags & NLM_F_MULTI)) return out;  // a doit's one reply
        }
    }
}

bool contains(const std::vector<uint32_t>& v, uint32_t x)
{
    for (uint32_t y : v)
        if (y == x) return true;
    return false;
}

}  // namespace

int main()
{
    const bool netlink = !(std::getenv("IWEMU_NETLINK") && !std::strcmp(std::getenv("IWEMU_NETLINK"), "off"));
    int num = 0;
    ibv_device** list = ibv_get_device_list(&num);
    CHECK(list && num >= 1);
    CHECK(!std::strcmp(ibv_get_device_name(list[0]), "iwemu0"));
    // Netlink discovery knows the kernel index; sysfs discovery does not.
    CHECK(ibv_get_device_index(list[0]) == (netlink ? 0 : -1));
    ibv_context* ctx = ibv_open_device(list[0]);
    CHECK(ctx);
    ibv_pd* pd = ibv_alloc_pd(ctx);
    ibv_cq* cq = ibv_create_cq(ctx, 16, nullptr, nullptr, 0);
    CHECK(pd && cq);
    static char buf[4096];
    ibv_mr* mr = ibv_reg_mr(pd, buf, sizeof buf, IBV_ACCESS_LOCAL_WRITE);
    ibv_qp_init_attr ia{};
    ia.send_cq = ia.recv_cq = cq;
    ia.qp_type = IBV_QPT_RC;
    ia.cap = {4, 4, 1, 1, 0};
    ibv_qp* qp = ibv_create_qp(pd, &ia);
    CHECK(mr && qp);
    auto release = [&] {
        ibv_destroy_qp(qp);
        ibv_dereg_mr(mr);
        ibv_destroy_cq(cq);
        ibv_dealloc_pd(pd);
        ibv_close_device(ctx);
        ibv_free_device_list(list);
    };

    if (!netlink) {
        CHECK(socket(AF_NETLINK, SOCK_RAW, NETLINK_RDMA) < 0 && errno == EPROTONOSUPPORT);
        std::puts("netlink off: sysfs discovery, socket refused");
        release();
        return 0;
    }

    int fd = nl_open();
    int err = 0;
    auto q = request(RDMA_NLDEV_CMD_RES_QP_GET, NLM_F_DUMP, 1);
    put_u32(q, RDMA_NLDEV_ATTR_DEV_INDEX, 0);
    send_msg(fd, q);
    std::vector<uint32_t> qpns = collect(fd, RDMA_NLDEV_ATTR_RES_LQPN, &err);
    CHECK(err == 0 && contains(qpns, qp->qp_num));

    auto m = request(RDMA_NLDEV_CMD_RES_MR_GET, NLM_F_DUMP, 2);
    put_u32(m, RDMA_NLDEV_ATTR_DEV_INDEX, 0);
    send_msg(fd, m);
    CHECK(contains(collect(fd, RDMA_NLDEV_ATTR_RES_LKEY, &err), mr->lkey) && err == 0);

    // The kernel's errors: a dump without its device, an unknown device, an unknown op.
    send_msg(fd, request(RDMA_NLDEV_CMD_RES_QP_GET, NLM_F_DUMP, 3));
    collect(fd, RDMA_NLDEV_ATTR_RES_LQPN, &err);
    CHECK(err == EINVAL);
    auto g = request(RDMA_NLDEV_CMD_GET, NLM_F_ACK, 4);
    put_u32(g, RDMA_NLDEV_ATTR_DEV_INDEX, 77);
    send_msg(fd, g);
    collect(fd, RDMA_NLDEV_ATTR_DEV_INDEX, &err);
    CHECK(err == EINVAL);
    send_msg(fd, request(200, 0, 5));
    collect(fd, 0, &err);
    CHECK(err == EINVAL);
    send_msg(fd, request(RDMA_NLDEV_CMD_SET, NLM_F_ACK, 6));
    collect(fd, 0, &err);
    CHECK(err == EOPNOTSUPP);

    // Random and mangled requests: whatever comes back, the process lives,
    // and a well-formed request afterwards is still answered.
    std::mt19937 rng(27);
    for (int i = 0; i < 2000; ++i) {
        std::vector<uint8_t> junk = request(static_cast<uint16_t>(rng() % 24), static_cast<uint16_t>(rng() & 0x31f), 100 + i);
        const size_t extra = rng() % 96;
        for (size_t k = 0; k < extra; ++k) junk.push_back(static_cast<uint8_t>(rng()));
        if (rng() % 3 == 0 && junk.size() > NLMSG_HDRLEN + 4) {  // a plausible attribute header with a bad length
            auto* a = reinterpret_cast<nlattr*>(junk.data() + NLMSG_HDRLEN);
            a->nla_type = static_cast<uint16_t>(rng() % RDMA_NLDEV_ATTR_MAX);
            a->nla_len = static_cast<uint16_t>(rng() % 200);
        }
        reinterpret_cast<nlmsghdr*>(junk.data())->nlmsg_len = static_cast<uint32_t>(rng() % 4 == 0 ? rng() % 512 : junk.size());
        if (send(fd, junk.data(), junk.size(), 0) < 0) continue;
        while (true) {  // drain whatever came back
            alignas(4) uint8_t sink[8192];
            if (recv(fd, sink, sizeof sink, MSG_DONTWAIT) <= 0) break;
        }
    }
    send_msg(fd, q);
    CHECK(contains(collect(fd, RDMA_NLDEV_ATTR_RES_LQPN, &err), qp->qp_num) && err == 0);
    close(fd);
    release();
    std::puts("netlink: own QP and MR listed, errors as the kernel's, 2000 malformed requests survived");
    return 0;
}
