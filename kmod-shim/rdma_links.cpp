#include "kmod-shim/rdma_links.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <sstream>
#include <vector>

#include "emulator/config.h"
#include "kmod-shim/sysfs_tree.h"

namespace iwemu::shim {
namespace {

std::vector<std::string> read_lines(const std::string& path)
{
    std::vector<std::string> lines;
    std::ifstream in(path);
    for (std::string l; std::getline(in, l);) lines.push_back(l);
    return lines;
}

// The NAME of an `rdma_link = NAME NETDEV` line, else "".
std::string link_name_of(const std::string& line)
{
    std::istringstream ss(line);
    std::string key, eq, name;
    if (!(ss >> key) || key.rfind("rdma_link", 0) != 0) return "";
    if (key == "rdma_link") {
        if (!(ss >> eq) || eq != "=") return "";
    } else if (key != "rdma_link=") {
        return "";
    }
    ss >> name;
    return name;
}

std::string write_lines(const std::string& path, const std::vector<std::string>& lines)
{
    if (path.empty()) return "no configuration file (neither IWEMU_CONFIG nor HOME is set)";
    const auto slash = path.rfind('/');
    if (slash != std::string::npos && slash > 0) mkdir(path.substr(0, slash).c_str(), 0700);  // ~/.config
    std::string text;
    for (const std::string& l : lines) text += l + "\n";
    const std::string tmp = path + ".tmp." + std::to_string(getpid());
    int fd = open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0) return "cannot create " + tmp + ": " + std::strerror(errno);
    bool ok = write(fd, text.data(), text.size()) == static_cast<ssize_t>(text.size());
    ok = close(fd) == 0 && ok;
    if (!ok || rename(tmp.c_str(), path.c_str()) != 0) {
        std::string err = "cannot write " + path + ": " + std::strerror(errno);
        unlink(tmp.c_str());
        return err;
    }
    return "";
}

}  // namespace

std::string rdma_link_store(const std::string& name, const std::string& netdev)
{
    const std::string path = user_config_path();
    std::vector<std::string> lines = read_lines(path);
    lines.push_back("rdma_link = " + name + " " + netdev + "   # rdma link add " + name + " type iwemu netdev " + netdev);
    return write_lines(path, lines);
}

std::string rdma_link_forget(const std::string& name)
{
    const std::string path = user_config_path();
    std::vector<std::string> kept;
    for (std::string& l : read_lines(path))
        if (link_name_of(l) != name) kept.push_back(std::move(l));
    return write_lines(path, kept);
}

std::string rdma_links_sync_tree()
{
    std::string error;
    const char* env = std::getenv("SYSFS_PATH");
    std::string root = env && *env ? env : default_sysfs_root(&error);
    if (root.empty()) return error;
    return sysfs_tree_sync(root, configured_devices(load_config()));
}

}  // namespace iwemu::shim
