#include "emulator/cm/start_key_startup.h"

#include <algorithm>

namespace iwemu::cm {

wire::StartKey make_start_key(const CmSettings& settings)
{
    wire::StartKey k;
    k.marker = true;
    k.crc = settings.crc;
    k.rev = 0;  // §8.1.1: "senders MUST set this field to zero"
    return k;
}

ConnectionParams start_key_params(const CmSettings& settings, const wire::StartKey& ours,
                                  const wire::StartKey& peer, ConnectionRole role, uint16_t ird,
                                  uint16_t ord)
{
    ConnectionParams c;
    c.role = role;
    c.mpa_revision = 0;
    c.ddp_rdmap_version = 0;
    const bool crc = ours.crc || peer.crc;  // "'1' in the Start Key from either endpoint"
    c.tx = {crc, peer.marker};              // the peer's M: markers in what it receives
    c.rx = {crc, ours.marker};
    c.rtr = RtrType::none;
    c.ird = std::min(ird, settings.max_ird);
    c.ord = std::min(ord, settings.max_ord);
    c.responder_may_send_first = false;  // rule 5
    return c;
}

}  // namespace iwemu::cm
