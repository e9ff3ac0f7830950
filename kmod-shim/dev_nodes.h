// The character devices under /dev/infiniband that the shim makes appear
// without creating anything under /dev (kernel-surface.md §1.3).
#pragma once

#include <sys/stat.h>

namespace iwemu::shim {

enum class DevNode { none, dir, uverbs, rdma_cm };

struct DevPath {
    DevNode node = DevNode::none;
    int index = 0;  // N of uverbsN
};

// Classifies an absolute path; uverbsN only if the sysfs tree lists it.
DevPath classify_dev_path(const char* path);

// A plausible stat for the node: S_IFCHR 0666 (S_IFDIR 0755 for the
// directory), the kernel's major/minor for uverbs (231:192+N) and rdma_cm
// (10:58 is what misc assigns on most systems; nothing checks it).
void fill_dev_stat(DevPath dev, struct stat* st);

}  // namespace iwemu::shim
