// RFC 7306 §5.1 Atomic Operations as arithmetic on the 64-bit target value,
// the verbs operations in those terms, and their application to memory.
//
// Values are big-endian on the wire (wire/rdmap_ext.h) and host order in
// memory: the target word is read and written in the Responder's byte order
// (§5.1: "applied in the target's memory byte order"), the original value
// lands in the requester's buffer in its own (verbs: host order).
#pragma once

#include <cstdint>

#include "emulator/wire/rdmap_ext.h"

namespace iwemu {

// The four data fields of an Atomic Request and its AOpCode (§5.2.1).
struct AtomicOperands {
    uint8_t aopcode = 0;               // wire::AtomicOpcode
    uint64_t add_or_swap = 0;          // Add Data / Swap Data
    uint64_t add_or_swap_mask = 0;     // Add Mask / Swap Mask
    uint64_t compare = 0;              // Compare Data (CmpSwap)
    uint64_t compare_mask = 0;         // Compare Mask (CmpSwap)
    constexpr bool operator==(const AtomicOperands&) const = default;
};

// §5.1.1 FetchAdd: the set bits of the Add Mask are the top bits of
// independent fields, and a carry out of such a bit is dropped (mask 0: one
// plain 64-bit add).  Adding with the top bits cleared keeps every carry
// inside its field; each top bit is then its own two bits plus that carry.
constexpr uint64_t fetch_add_result(uint64_t old, uint64_t add, uint64_t mask)
{
    return ((old & ~mask) + (add & ~mask)) ^ ((old ^ add) & mask);
}

// §5.1.2 CmpSwap: when the masked bits of Compare Data equal the target's,
// the bits of the Swap Mask take the Swap Data; otherwise nothing changes.
constexpr uint64_t compare_swap_result(uint64_t old, uint64_t compare, uint64_t compare_mask, uint64_t swap,
                                       uint64_t swap_mask)
{
    if (((compare ^ old) & compare_mask) != 0) return old;
    return (old & ~swap_mask) | (swap & swap_mask);
}

constexpr bool atomic_opcode_supported(uint8_t aopcode)
{
    return aopcode == static_cast<uint8_t>(wire::AtomicOpcode::fetch_add) ||
           aopcode == static_cast<uint8_t>(wire::AtomicOpcode::compare_swap);
}

// The new target value (aopcode must be supported).
constexpr uint64_t atomic_result(uint64_t old, const AtomicOperands& op)
{
    if (op.aopcode == static_cast<uint8_t>(wire::AtomicOpcode::fetch_add))
        return fetch_add_result(old, op.add_or_swap, op.add_or_swap_mask);
    return compare_swap_result(old, op.compare, op.compare_mask, op.add_or_swap, op.add_or_swap_mask);
}

// Verbs atomics in RFC 7306 terms (WIRE.md §8.6, VECTORS V-X2): FetchAdd
// is one plain 64-bit add (Add Mask 0; Compare Data 0 and Compare Mask all
// ones are unused), CmpSwap compares and swaps all 64 bits.
constexpr AtomicOperands verbs_fetch_add(uint64_t add)
{
    return {static_cast<uint8_t>(wire::AtomicOpcode::fetch_add), add, 0, 0, ~uint64_t{0}};
}
constexpr AtomicOperands verbs_compare_swap(uint64_t compare, uint64_t swap)
{
    return {static_cast<uint8_t>(wire::AtomicOpcode::compare_swap), swap, ~uint64_t{0}, compare, ~uint64_t{0}};
}

// Apply `op` to the 8 octets at `word` and return their original value,
// atomically with respect to every other apply_atomic of this process (all
// QPs of the emulator: IBV_ATOMIC_HCA).  An 8-octet aligned word is changed
// with one locked instruction, so it is atomic for the host's CPUs too; a
// word the region maps to an unaligned host address (an Atomic Request's TO
// is aligned, the region's iova need not match its address) takes a lock
// chosen by address instead.
uint64_t apply_atomic(uint8_t* word, const AtomicOperands& op);

}  // namespace iwemu
