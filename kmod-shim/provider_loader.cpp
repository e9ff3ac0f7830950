#include "kmod-shim/provider_loader.h"

#include <dlfcn.h>

#include <cstdio>
#include <cstdlib>
#include <mutex>
#include <string>

namespace iwemu::shim {
namespace {

constexpr const char* kProviderFile = "libiwemu-rdmav34.so";

std::string shim_dir()
{
    Dl_info info{};
    if (dladdr(reinterpret_cast<void*>(&ensure_provider_loaded), &info) == 0 || !info.dli_fname) return "";
    std::string path = info.dli_fname;
    auto slash = path.rfind('/');
    return slash == std::string::npos ? "" : path.substr(0, slash);
}

bool try_load(const std::string& path)
{
    return dlopen(path.c_str(), RTLD_NOW | RTLD_GLOBAL) != nullptr;
}

void load()
{

    if (const char* explicit_path = std::getenv("IWEMU_PROVIDER"); explicit_path && *explicit_path) {
        if (!try_load(explicit_path))
            std::fprintf(stderr, "iwemu: cannot load provider %s: %s\n", explicit_path, dlerror());
        return;
    }
    std::string dir = shim_dir();
    if (!dir.empty() && (try_load(dir + "/" + kProviderFile) || try_load(dir + "/../libibverbs/" + kProviderFile)))
        return;
    if (!try_load(kProviderFile))
        std::fprintf(stderr, "iwemu: provider %s not found (set IWEMU_PROVIDER)\n", kProviderFile);
}

}  // namespace

void ensure_provider_loaded()
{
    static std::mutex mutex;
    static bool attempted = false;
    std::lock_guard lock(mutex);
    if (attempted) return;
    // Without libibverbs the provider cannot even be dlopen()ed (it needs
    // IBVERBS_PRIVATE_34), and a process that has no libibverbs has no use
    // for it: leave such processes (shells, strace, ...) untouched, and try
    // again at the next discovery.
    void* verbs = dlopen("libibverbs.so.1", RTLD_NOW | RTLD_NOLOAD);
    if (!verbs) return;
    dlclose(verbs);  // drop the reference NOLOAD took
    attempted = true;
    load();
}

}  // namespace iwemu::shim
