// ports/1/hw_counters/<name> of the generated sysfs tree: the files exist
// (sysfs_tree.cpp writes them, so `ls` and scripts find them), and an open
// for reading through the shim gets the counter's current value, as a read
// of a kernel device's hw_counters file does (nldev_hw_counters()).
#pragma once

namespace iwemu::shim {

// An fd (memfd) holding "<value>\n" when `path` (already redirected into
// the tree, absolute) names a hw_counters file of a known device and flags
// open it read-only; -2 when the path is not one; -1 with errno on failure.
int open_hw_counter(const char* path, int flags);

}  // namespace iwemu::shim
