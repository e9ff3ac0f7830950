// No C++ exception crosses the C ABI into libibverbs.  Every op the provider
// hands to libibverbs is installed as Guard<op>::call, which turns an
// exception (in practice std::bad_alloc from the emulator's containers) into
// the verbs error convention: NULL + errno for constructors, a positive errno
// for int-returning ops, nothing for void ops.  Zero cost on the normal path.
#pragma once

#include <cerrno>
#include <new>
#include <type_traits>

namespace iwemu::provider {

template <typename R>
R exception_result(int err) noexcept
{
    if constexpr (std::is_pointer_v<R>) {
        errno = err;
        return nullptr;
    } else if constexpr (std::is_same_v<R, bool>) {
        return false;
    } else if constexpr (std::is_integral_v<R>) {
        return static_cast<R>(err);
    } else {
        static_assert(std::is_void_v<R>);
    }
}

template <auto Fn>
struct Guard;

template <typename R, typename... A, R (*Fn)(A...)>
struct Guard<Fn> {
    static R call(A... args) noexcept
    {
        try {
            return Fn(args...);
        } catch (const std::bad_alloc&) {
            return exception_result<R>(ENOMEM);
        } catch (...) {
            return exception_result<R>(EIO);
        }
    }
};

}  // namespace iwemu::provider
