// The Terminate codes a failed remote access earns: one place for the
// (layer, etype, code) triples the receive path and the atomic responder
// both send.
#pragma once

#include <cstdint>

#include "emulator/stag_table.h"
#include "emulator/wire/terminate_codes.h"

namespace iwemu::stag_terminate {

constexpr wire::TerminateCode ddp_tagged(uint8_t code)
{
    return {wire::TerminateLayer::ddp, wire::etype::ddp_tagged_buffer, code};
}
constexpr wire::TerminateCode ddp_untagged(uint8_t code)
{
    return {wire::TerminateLayer::ddp, wire::etype::ddp_untagged_buffer, code};
}
constexpr wire::TerminateCode rdmap_prot(uint8_t code)
{
    return {wire::TerminateLayer::rdmap, wire::etype::rdmap_remote_protection, code};
}
constexpr wire::TerminateCode rdmap_op(uint8_t code)
{
    return {wire::TerminateLayer::rdmap, wire::etype::rdmap_remote_operation, code};
}

// A tagged DDP segment's sink (RFC 5041 §7.2).  DDP has no "access rights"
// code: like Linux siw, a missing right is reported as an invalid STag.
constexpr wire::TerminateCode for_tagged_sink(StagError e)
{
    namespace ec = wire::ecode;
    switch (e) {
    case StagError::bounds: return ddp_tagged(ec::ddp_tagged_base_or_bounds_violation);
    case StagError::pd_mismatch: return ddp_tagged(ec::ddp_tagged_stag_not_associated);
    case StagError::to_wrap: return ddp_tagged(ec::ddp_tagged_to_wrap);
    default: return ddp_tagged(ec::ddp_tagged_invalid_stag);
    }
}

// An RDMAP-checked STag: a Read Request's source (RFC 5040 §5.2.1, §7.2,
// RDMAP-009) and an atomic operation's target.
constexpr wire::TerminateCode for_rdmap_stag(StagError e)
{
    namespace ec = wire::ecode;
    switch (e) {
    case StagError::bounds: return rdmap_prot(ec::rdmap_base_or_bounds_violation);
    case StagError::pd_mismatch: return rdmap_prot(ec::rdmap_stag_not_associated);
    case StagError::access: return rdmap_prot(ec::rdmap_access_rights_violation);
    case StagError::to_wrap: return rdmap_prot(ec::rdmap_to_wrap);
    default: return rdmap_prot(ec::rdmap_invalid_stag);
    }
}

}  // namespace iwemu::stag_terminate
