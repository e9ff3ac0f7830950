// Makes the iwemu provider known to libibverbs before it matches devices.
//
// libibverbs matches sysfs candidates against the providers already
// registered before it dlopen()s anything from /etc/libibverbs.d or
// RDMAV_DRIVERS (kernel-surface.md §1.4, §7.1).  The shim therefore loads the
// provider itself at the first sign of device discovery -- the NETLINK_RDMA
// socket libibverbs and librdmacm open first, or a stat() of
// /dev/infiniband/uverbsN -- and only when libibverbs is already in the
// process.  Its constructor registers the driver, so iwemu0 is matched in
// the first pass and no other provider is ever loaded.
#pragma once

namespace iwemu::shim {

// Idempotent and thread-safe.  Looks in $IWEMU_PROVIDER, then next to the
// shim, then in ../libibverbs/ relative to the shim, then the library path.
void ensure_provider_loaded();

}  // namespace iwemu::shim
