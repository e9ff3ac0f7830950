// Protection Domain: the unit of STag-to-stream association (RFC 5041 §8.2).
// A tagged access is allowed only when the STag's PD is the QP's PD.
#pragma once

#include <atomic>
#include <cstdint>

namespace iwemu {

class ProtectionDomain {
public:
    explicit ProtectionDomain(uint32_t handle) : handle_(handle) {}
    ProtectionDomain(const ProtectionDomain&) = delete;
    ProtectionDomain& operator=(const ProtectionDomain&) = delete;

    uint32_t handle() const { return handle_; }
    // Objects (MR, QP, SRQ) that still name this PD; dealloc_pd refuses (EBUSY) while > 0.
    uint32_t users() const { return users_.load(std::memory_order_acquire); }

    void* user_context = nullptr;  // free for the provider / shim

private:
    friend class Emulator;
    uint32_t handle_;
    std::atomic<uint32_t> users_{0};
};

}  // namespace iwemu
