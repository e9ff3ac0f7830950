// iwemu-run: runs an unmodified program over iwemu.
//
//   iwemu-run [--env] PROGRAM [ARGS...]
//
// Prepares the sysfs tree, then execs PROGRAM with the shim preloaded and
// libibverbs/librdmacm pointed at the tree.  The shim and the provider are
// found relative to this executable, so the same binary works from the build
// tree (build/bin -> build/lib) and when installed (bin -> <libdir>/iwemu,
// provider in <libdir>/libibverbs, e.g. /usr/lib/x86_64-linux-gnu/...).
#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <string_view>
#include <vector>

#include "emulator/config.h"
#include "emulator/port_netdev.h"
#include "kmod-shim/sysfs_tree.h"

// <bindir> -> <libdir>, relative (set by kmod-shim/CMakeLists.txt).
#ifndef IWEMU_BIN_TO_LIBDIR
#define IWEMU_BIN_TO_LIBDIR "../lib"
#endif

// Sanitized builds (cmake/sanitizers.cmake): the sanitizer runtime, preloaded
// ahead of the shim because ASan must be the first object in the process and
// the programs we run are not instrumented.
#ifndef IWEMU_PRELOAD_FIRST
#define IWEMU_PRELOAD_FIRST ""
#endif

namespace {

constexpr const char* kShim = "libiwemu-shim.so";
constexpr const char* kProvider = "libiwemu-rdmav34.so";

void usage(FILE* out)
{
    std::fprintf(out,
                 "usage: iwemu-run [--env] PROGRAM [ARGS...]\n"
                 "\n"
                 "Runs PROGRAM with the iwemu software iWARP RNIC: the device iwemu0 appears to\n"
                 "libibverbs and librdmacm without RDMA in the kernel and without root.\n"
                 "\n"
                 "  --env     print the environment iwemu-run would set (shell syntax) and exit\n"
                 "  --help    this text\n"
                 "\n"
                 "Environment:\n"
                 "  IWEMU_LIBDIR     directory holding %s and %s (default: found\n"
                 "                   relative to iwemu-run)\n"
                 "  IWEMU_PROVIDER   full path of %s (overrides the search)\n"
                 "  XDG_RUNTIME_DIR  the sysfs tree goes to $XDG_RUNTIME_DIR/iwemu/sysfs-net<N>, else\n"
                 "                   to /tmp/iwemu-<uid>/sysfs-net<N> (N: the network namespace)\n",
                 kShim, kProvider, kProvider);
}

std::string self_dir()
{
    char buf[4096];
    ssize_t n = readlink("/proc/self/exe", buf, sizeof buf - 1);
    if (n <= 0) return ".";
    std::string path(buf, static_cast<size_t>(n));
    return path.substr(0, path.rfind('/'));
}

bool readable(const std::string& path) { return access(path.c_str(), R_OK) == 0; }

// First directory in dirs that holds file; the list of places looked at goes
// to *looked for the error message.
std::string find_in(const std::vector<std::string>& dirs, const char* file, std::string* looked)
{
    for (const std::string& d : dirs) {
        std::string path = d + "/" + file;
        if (readable(path)) {
            char* canonical = realpath(path.c_str(), nullptr);
            if (canonical) {
                path = canonical;
                std::free(canonical);
            }
            return path;
        }
        *looked += "\n    " + d;
    }
    return "";
}

std::string join_env(const char* name, const std::string& first, char sep)
{
    const char* old = std::getenv(name);
    return old && *old ? first + sep + old : first;
}

// LD_PRELOAD for the program: the shim ahead of what was there; in sanitized
// builds the runtime ahead of both (once: a nested iwemu-run inherits it).
std::string preload_list(const std::string& shim)
{
    const std::string_view first = IWEMU_PRELOAD_FIRST;
    std::string_view old = std::getenv("LD_PRELOAD") ? std::getenv("LD_PRELOAD") : "";
    std::string list;
    if (!first.empty()) {
        if (old.starts_with(first) && (old.size() == first.size() || old[first.size()] == ':'))
            old.remove_prefix(std::min(old.size(), first.size() + 1));
        list.append(first).append(":");
    }
    list += shim;
    if (!old.empty()) list.append(":").append(old);
    return list;
}

}  // namespace

int main(int argc, char** argv)
{
    int first = 1;
    bool print_env = false;
    while (first < argc && argv[first][0] == '-') {
        if (!std::strcmp(argv[first], "--help") || !std::strcmp(argv[first], "-h")) {
            usage(stdout);
            return 0;
        }
        if (!std::strcmp(argv[first], "--env")) {
            print_env = true;
        } else if (!std::strcmp(argv[first], "--")) {
            ++first;
            break;
        } else {
            std::fprintf(stderr, "iwemu-run: unknown option %s\n", argv[first]);
            usage(stderr);
            return 2;
        }
        ++first;
    }
    if (first >= argc && !print_env) {
        usage(stderr);
        return 2;
    }

    const std::string bin = self_dir();
    std::vector<std::string> dirs;
    if (const char* d = std::getenv("IWEMU_LIBDIR"); d && *d) dirs.push_back(d);
    // Build tree first (build/bin -> build/lib), then the installed layout.
    const std::string libdir = bin + "/" IWEMU_BIN_TO_LIBDIR;
    for (const std::string& d : {bin + "/../lib", libdir + "/iwemu"}) dirs.push_back(d);

    std::string looked;
    std::string shim = find_in(dirs, kShim, &looked);
    if (shim.empty()) {
        std::fprintf(stderr, "iwemu-run: cannot find %s; looked in:%s\n(set IWEMU_LIBDIR, or build the target iwemu_shim)\n",
                     kShim, looked.c_str());
        return 127;
    }
    std::string provider;
    if (const char* p = std::getenv("IWEMU_PROVIDER"); p && *p) {
        provider = p;
        if (!readable(provider)) {
            std::fprintf(stderr, "iwemu-run: IWEMU_PROVIDER=%s is not readable\n", p);
            return 127;
        }
    } else {
        std::vector<std::string> pdirs = dirs;
        pdirs.push_back(libdir + "/libibverbs");  // where libibverbs itself looks
        looked.clear();
        provider = find_in(pdirs, kProvider, &looked);
        if (provider.empty()) {
            std::fprintf(stderr, "iwemu-run: cannot find %s; looked in:%s\n(set IWEMU_PROVIDER, or build the target iwemu_provider)\n",
                         kProvider, looked.c_str());
            return 127;
        }
    }

    const iwemu::Config config = iwemu::load_config();
    if (!config.faults_error.empty()) {
        // Fatal, unlike other bad settings: a test run without the faults it
        // asked for would pass for nothing.
        std::fprintf(stderr, "iwemu-run: IWEMU_FAULTS: %s\niwemu-run: a fault-injection rule does not parse; %s not started\n",
                     config.faults_error.c_str(), first < argc ? argv[first] : "nothing");
        return 2;
    }
    std::string error;
    std::string sysfs = iwemu::shim::default_sysfs_root(&error);
    if (sysfs.empty() || !(error = iwemu::shim::sysfs_tree_sync(sysfs, iwemu::shim::configured_devices(config))).empty()) {
        std::fprintf(stderr, "iwemu-run: cannot prepare the sysfs tree: %s\n", error.c_str());
        return 1;
    }

    // libibverbs warns when the locked-memory limit is tiny (no MR is
    // actually pinned by iwemu): give the program the hard limit.
    rlimit lim{};
    if (getrlimit(RLIMIT_MEMLOCK, &lim) == 0 && lim.rlim_cur < lim.rlim_max) {
        lim.rlim_cur = lim.rlim_max;
        setrlimit(RLIMIT_MEMLOCK, &lim);
    }

    const std::string drivers_stem = provider.substr(0, provider.size() - std::strlen("-rdmav34.so"));
    const std::pair<const char*, std::string> env[] = {
        {"SYSFS_PATH", sysfs},
        {"IWEMU_PROVIDER", provider},
        {"LD_PRELOAD", preload_list(shim)},
        // Fallback only: the shim registers the provider before libibverbs
        // matches devices, so this list is normally never consulted.
        {"RDMAV_DRIVERS", join_env("RDMAV_DRIVERS", drivers_stem, ':')},
    };
    for (const auto& [name, value] : env) {
        if (print_env)
            std::printf("export %s='%s'\n", name, value.c_str());
        else if (setenv(name, value.c_str(), 1) != 0) {
            std::fprintf(stderr, "iwemu-run: setenv %s: %s\n", name, std::strerror(errno));
            return 1;
        }
    }
    if (print_env) return 0;

    execvp(argv[first], argv + first);
    std::fprintf(stderr, "iwemu-run: cannot run %s: %s\n", argv[first], std::strerror(errno));
    return errno == ENOENT ? 127 : 126;
}
