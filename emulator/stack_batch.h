// A stack array left uninitialized: the caller fills only the entries it
// uses.  A plain array of a type with default member initializers (work
// requests, completions, std::span) is zeroed whole on every call, which on
// the data path costs more than filling the few entries used.
#pragma once

#include <cstddef>

namespace iwemu {

template <typename T, size_t N>
union StackBatch {
    StackBatch() {}
    T items[N];
};

}  // namespace iwemu
