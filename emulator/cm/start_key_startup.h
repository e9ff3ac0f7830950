// draft-03 startup (seed 000 §8.1, §8.1.1, §13.3) as pure functions: the
// Start Key this end sends and the QP parameters both keys imply.  The CM
// state machine (connection_manager.cpp) orders the exchange:
//
//   Initiator = the draft's "Passive" side (its §13.3 example: the side that
//   received the last streaming-mode message, here none): sends its Start
//   Key right after the TCP connect (rule 1), waits for the Responder's key
//   (rule 4) and sends the first FPDU.
//   Responder = the draft's "Active" side: waits for the Initiator's key,
//   offers the connection to the ULP, and on accept() sends its own key
//   (rule 2); it sends no FPDU before the Initiator's first (rule 5: the
//   QP's Responder gate, ConnectionParams::responder_may_send_first false).
//   A key that is not "MPA ident frame", or Rev != 0, closes the connection
//   (rule 6, §9 error 4).  reject() closes without a key (§13.3).
//
// Negotiation (§8.1.1): M in a key = markers wanted in what its sender
// receives; C = 1 from either side = CRC both ways.  No IRD/ORD, no RTR, no
// Private Data (the draft carries it outside MPA in a streaming-mode message
// whose format figure is lost: iwemu offers none, docs/interop.md).  The
// connection runs DDP/RDMAP version 0, as the draft's example FPDUs.
#pragma once

#include <cstdint>

#include "emulator/cm/cm_settings.h"
#include "emulator/base/connection_params.h"
#include "emulator/wire/start_key.h"

namespace iwemu::cm {

// Whether a Responder under `settings` answers a Start Key (start-key mode,
// or permissive towards pre-RFC peers: mpa_rev0 = accept).
constexpr bool recognises_start_key(const CmSettings& settings)
{
    return settings.start_key || settings.accept_rev0;
}

// The key we send: M=1 (markers, as the RDMA Consortium era ran them), C as
// configured (CmSettings::crc, on by default), Rev 0.
wire::StartKey make_start_key(const CmSettings& settings);

// Parameters for the QP once both keys are in.  ird/ord: this end's own
// values (nothing is negotiated), capped at the device limits.
ConnectionParams start_key_params(const CmSettings& settings, const wire::StartKey& ours,
                                  const wire::StartKey& peer, ConnectionRole role, uint16_t ird,
                                  uint16_t ord);

}  // namespace iwemu::cm
