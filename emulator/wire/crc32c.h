// CRC-32C (Castagnoli) as MPA uses it for the FPDU CRC field.
// RFC 5044 §4.4 points to the iSCSI digest of RFC 3720 §12.1: polynomial
// 0x1EDC6F41 (reflected 0x82F63B78), register preset 0xFFFFFFFF, reflected
// in and out, final complement.  The value is stored least significant
// octet first (RFC 5044 Figures 5/6, RFC 3720 App. B.4).
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>

namespace iwemu::wire {

inline constexpr size_t mpa_crc_size = 4;

// crc32c() over intact covered octets followed by their own CRC field
// (WIRE.md §6.5 "receiver shortcut").
inline constexpr uint32_t crc32c_good_residue = 0x48674BC7;

// Incremental CRC over scattered pieces (an FPDU built from header scratch,
// user payload slices, markers, PAD): update() each piece in stream order.
class Crc32c {
public:
    void reset() { reg_ = 0xFFFFFFFFu; }
    void update(std::span<const uint8_t> bytes);
    void update(const uint8_t* data, size_t len);
    // The MPA CRC value of everything fed so far (complemented register).
    uint32_t value() const { return ~reg_; }

private:
    uint32_t reg_ = 0xFFFFFFFFu;  // raw register, as ISA-L crc32_iscsi keeps it
};

// One-shot CRC-32C (ISA-L).  crc32c("123456789") == 0xE3069283.
uint32_t crc32c(std::span<const uint8_t> bytes);

// Portable bit-at-a-time reference used by tests to cross-check ISA-L; never
// on a data path.
constexpr uint32_t crc32c_bitwise(std::span<const uint8_t> bytes)
{
    uint32_t crc = 0xFFFFFFFFu;
    for (uint8_t b : bytes) {
        crc ^= b;
        for (int i = 0; i < 8; ++i)
            crc = (crc >> 1) ^ ((crc & 1u) ? 0x82F63B78u : 0u);
    }
    return ~crc;
}

// CRC field codec: value v travels as v&0xFF, v>>8, v>>16, v>>24 (RFC 5044 §4.4).
constexpr void store_crc_field(uint32_t value, uint8_t* out)
{
    out[0] = static_cast<uint8_t>(value);
    out[1] = static_cast<uint8_t>(value >> 8);
    out[2] = static_cast<uint8_t>(value >> 16);
    out[3] = static_cast<uint8_t>(value >> 24);
}

constexpr uint32_t load_crc_field(const uint8_t* in)
{
    return uint32_t{in[0]} | uint32_t{in[1]} << 8 | uint32_t{in[2]} << 16 | uint32_t{in[3]} << 24;
}

}  // namespace iwemu::wire
