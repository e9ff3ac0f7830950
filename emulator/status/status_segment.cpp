#include "emulator/status/status_segment.h"

#include <netinet/in.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>

namespace iwemu {

void StatusAddress::store(const sockaddr_storage& a)
{
    uint64_t words[3] = {a.ss_family, 0, 0};
    if (a.ss_family == AF_INET) {
        const auto& in = reinterpret_cast<const sockaddr_in&>(a);
        words[0] |= uint64_t{ntohs(in.sin_port)} << 16;
        std::memcpy(&words[1], &in.sin_addr, sizeof in.sin_addr);
    } else if (a.ss_family == AF_INET6) {
        const auto& in6 = reinterpret_cast<const sockaddr_in6&>(a);
        words[0] |= uint64_t{ntohs(in6.sin6_port)} << 16;
        std::memcpy(&words[1], &in6.sin6_addr, sizeof in6.sin6_addr);
    }
    for (int i = 0; i < 3; ++i) w[i].store(words[i], std::memory_order_relaxed);
}

sockaddr_storage StatusAddress::load() const
{
    uint64_t words[3];
    for (int i = 0; i < 3; ++i) words[i] = w[i].load(std::memory_order_relaxed);
    sockaddr_storage a{};
    const auto family = static_cast<sa_family_t>(words[0] & 0xffff);
    const auto port = htons(static_cast<uint16_t>(words[0] >> 16));
    if (family == AF_INET) {
        auto& in = reinterpret_cast<sockaddr_in&>(a);
        in.sin_family = AF_INET;
        in.sin_port = port;
        std::memcpy(&in.sin_addr, &words[1], sizeof in.sin_addr);
    } else if (family == AF_INET6) {
        auto& in6 = reinterpret_cast<sockaddr_in6&>(a);
        in6.sin6_family = AF_INET6;
        in6.sin6_port = port;
        std::memcpy(&in6.sin6_addr, &words[1], sizeof in6.sin6_addr);
    }
    return a;
}

namespace {

bool private_dir(const std::string& path)
{
    struct stat st {};
    if (lstat(path.c_str(), &st) != 0) return false;
    return S_ISDIR(st.st_mode) && st.st_uid == getuid() && (st.st_mode & 077) == 0;
}

// path exists as a private directory afterwards (made 0700 when `create`).
bool ensure_dir(const std::string& path, bool create, std::string* error)
{
    if (create && mkdir(path.c_str(), 0700) != 0 && errno != EEXIST) {
        *error = "cannot create " + path + ": " + std::strerror(errno);
        return false;
    }
    if (!private_dir(path)) {
        *error = path + " is not a directory of uid " + std::to_string(getuid()) + " with mode 0700";
        return false;
    }
    return true;
}

}  // namespace

std::string status_directory(bool create, std::string* error)
{
    std::string base;
    if (const char* xdg = std::getenv("XDG_RUNTIME_DIR"); xdg && xdg[0] == '/') {
        struct stat st {};
        if (lstat(xdg, &st) == 0 && S_ISDIR(st.st_mode) && st.st_uid == getuid() && (st.st_mode & 022) == 0 &&
            access(xdg, W_OK | X_OK) == 0)
            base = std::string(xdg) + "/iwemu";
    }
    if (base.empty()) base = "/tmp/iwemu-" + std::to_string(getuid());
    if (!ensure_dir(base, create, error)) return "";
    const std::string dir = base + "/status";
    if (!ensure_dir(dir, create, error)) return "";
    return dir;
}

uint64_t process_start_time(uint32_t pid)
{
    const std::string path = "/proc/" + std::to_string(pid) + "/stat";
    const int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) return 0;
    char buf[1024];
    const ssize_t n = read(fd, buf, sizeof buf - 1);
    close(fd);
    if (n <= 0) return 0;
    buf[n] = '\0';
    // comm may hold spaces and parentheses: fields count from the last ')'.
    const char* p = std::strrchr(buf, ')');
    if (!p) return 0;
    ++p;
    for (int field = 3; field < 22 && *p; ++field) {  // p is before field 3 (state)
        while (*p == ' ') ++p;
        while (*p && *p != ' ') ++p;
    }
    return std::strtoull(p, nullptr, 10);
}

}  // namespace iwemu
