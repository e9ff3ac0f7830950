// Names of the Terminate codes: RFC 5040 §4.8 Fig. 9, RFC 5041 §7.2,
// RFC 5044 §8, RFC 6581 §8, registries of RFC 6580 §3 (WIRE.md §9).
#include "emulator/wire/terminate_codes.h"

namespace iwemu::wire {
namespace {

struct NamedCode {
    uint8_t layer, etype, code;
    std::string_view name;
};

// Every registered (layer, etype, code); "any code" entries are handled apart.
constexpr NamedCode named_codes[] = {
    {0, 1, 0x00, "RDMAP/Remote Protection/Invalid STag"},
    {0, 1, 0x01, "RDMAP/Remote Protection/Base or bounds violation"},
    {0, 1, 0x02, "RDMAP/Remote Protection/Access rights violation"},
    {0, 1, 0x03, "RDMAP/Remote Protection/STag not associated with RDMAP Stream"},
    {0, 1, 0x04, "RDMAP/Remote Protection/TO wrap"},
    {0, 1, 0x09, "RDMAP/Remote Protection/STag cannot be Invalidated"},
    {0, 1, 0xFF, "RDMAP/Remote Protection/Unspecified Error"},
    {0, 2, 0x05, "RDMAP/Remote Operation/Invalid RDMAP version"},
    {0, 2, 0x06, "RDMAP/Remote Operation/Unexpected OpCode"},
    {0, 2, 0x07, "RDMAP/Remote Operation/Catastrophic error, localized to RDMAP Stream"},
    {0, 2, 0x08, "RDMAP/Remote Operation/Catastrophic error, global"},
    {0, 2, 0x09, "RDMAP/Remote Operation/STag cannot be Invalidated"},
    {0, 2, 0xFF, "RDMAP/Remote Operation/Unspecified Error"},
    {1, 0, 0x00, "DDP/Local Catastrophic"},
    {1, 1, 0x00, "DDP/Tagged Buffer/Invalid STag"},
    {1, 1, 0x01, "DDP/Tagged Buffer/Base or bounds violation"},
    {1, 1, 0x02, "DDP/Tagged Buffer/STag not associated with DDP Stream"},
    {1, 1, 0x03, "DDP/Tagged Buffer/TO wrap"},
    {1, 1, 0x04, "DDP/Tagged Buffer/Invalid DDP version"},
    {1, 2, 0x01, "DDP/Untagged Buffer/Invalid QN"},
    {1, 2, 0x02, "DDP/Untagged Buffer/Invalid MSN - no buffer available"},
    {1, 2, 0x03, "DDP/Untagged Buffer/Invalid MSN - MSN range is not valid"},
    {1, 2, 0x04, "DDP/Untagged Buffer/Invalid MO"},
    {1, 2, 0x05, "DDP/Untagged Buffer/DDP Message too long for available buffer"},
    {1, 2, 0x06, "DDP/Untagged Buffer/Invalid DDP version"},
    {2, 0, 0x01, "LLP/MPA/TCP connection closed, terminated or lost"},
    {2, 0, 0x02, "LLP/MPA/CRC error"},
    {2, 0, 0x03, "LLP/MPA/Marker and ULPDU_Length disagree"},
    {2, 0, 0x04, "LLP/MPA/Invalid MPA Request or Reply frame"},
    {2, 0, 0x05, "LLP/MPA/Local catastrophic error"},
    {2, 0, 0x06, "LLP/MPA/Insufficient IRD resources"},
    {2, 0, 0x07, "LLP/MPA/No matching RTR option"},
};

const NamedCode* find_named(TerminateCode c)
{
    for (const NamedCode& n : named_codes)
        if (n.layer == static_cast<uint8_t>(c.layer) && n.etype == c.etype && n.code == c.error_code)
            return &n;
    return nullptr;
}

// Codes where the RFC allows any Error Code value.
bool any_code_etype(TerminateCode c)
{
    return (c.layer == TerminateLayer::rdmap && c.etype == etype::rdmap_local_catastrophic) ||
           (c.layer == TerminateLayer::ddp && c.etype == etype::ddp_rsvd_for_llp);
}

}  // namespace

bool terminate_code_defined(TerminateCode c)
{
    return any_code_etype(c) || find_named(c) != nullptr;
}

std::string_view terminate_layer_name(TerminateLayer layer)
{
    switch (layer) {
    case TerminateLayer::rdmap: return "RDMAP";
    case TerminateLayer::ddp: return "DDP";
    case TerminateLayer::llp: return "LLP";
    }
    return "undefined layer";
}

std::string_view terminate_etype_name(TerminateLayer layer, uint8_t e)
{
    switch (layer) {
    case TerminateLayer::rdmap:
        if (e == etype::rdmap_local_catastrophic) return "Local Catastrophic";
        if (e == etype::rdmap_remote_protection) return "Remote Protection";
        if (e == etype::rdmap_remote_operation) return "Remote Operation";
        break;
    case TerminateLayer::ddp:
        if (e == etype::ddp_local_catastrophic) return "Local Catastrophic";
        if (e == etype::ddp_tagged_buffer) return "Tagged Buffer";
        if (e == etype::ddp_untagged_buffer) return "Untagged Buffer";
        if (e == etype::ddp_rsvd_for_llp) return "Reserved for the LLP";
        break;
    case TerminateLayer::llp:
        if (e == etype::llp_mpa) return "MPA";
        break;
    }
    return "undefined EType";
}

std::string_view terminate_code_name(TerminateCode c)
{
    if (const NamedCode* n = find_named(c))
        return n->name;
    if (c.layer == TerminateLayer::rdmap && c.etype == etype::rdmap_local_catastrophic)
        return "RDMAP/Local Catastrophic";
    if (c.layer == TerminateLayer::ddp && c.etype == etype::ddp_rsvd_for_llp)
        return "DDP/Reserved for the LLP";
    switch (c.layer) {
    case TerminateLayer::rdmap:
        if (c.etype == etype::rdmap_remote_protection) return "RDMAP/Remote Protection/undefined code";
        if (c.etype == etype::rdmap_remote_operation) return "RDMAP/Remote Operation/undefined code";
        return "RDMAP/undefined EType";
    case TerminateLayer::ddp:
        if (c.etype == etype::ddp_local_catastrophic) return "DDP/Local Catastrophic/undefined code";
        if (c.etype == etype::ddp_tagged_buffer) return "DDP/Tagged Buffer/undefined code";
        if (c.etype == etype::ddp_untagged_buffer) return "DDP/Untagged Buffer/undefined code";
        return "DDP/undefined EType";
    case TerminateLayer::llp:
        if (c.etype == etype::llp_mpa) return "LLP/MPA/undefined code";
        return "LLP/undefined EType";
    }
    return "undefined layer";
}

}  // namespace iwemu::wire
