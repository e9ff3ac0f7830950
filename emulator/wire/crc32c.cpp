// CRC-32C through ISA-L.  crc32_iscsi() keeps the register un-complemented
// across calls, which is exactly the incremental form MPA needs.
#include "emulator/wire/crc32c.h"

#include <isa-l/crc.h>

#include <climits>

namespace iwemu::wire {

void Crc32c::update(const uint8_t* data, size_t len)
{
    // crc32_iscsi takes an int length; FPDUs are < 64 KiB but callers may CRC more.
    while (len > 0) {
        const size_t n = len > size_t{INT_MAX} ? size_t{INT_MAX} : len;
        reg_ = crc32_iscsi(const_cast<uint8_t*>(data), static_cast<int>(n), reg_);
        data += n;
        len -= n;
    }
}

void Crc32c::update(std::span<const uint8_t> bytes)
{
    update(bytes.data(), bytes.size());
}

uint32_t crc32c(std::span<const uint8_t> bytes)
{
    Crc32c c;
    c.update(bytes);
    return c.value();
}

}  // namespace iwemu::wire
