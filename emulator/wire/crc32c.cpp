// CRC-32C through ISA-L.  crc32_iscsi() keeps the register un-complemented
// across calls, which is exactly the incremental form MPA needs.
//
// FPDUs are CRC'd in pieces, many of them tiny (ULPDU_Length, DDP header,
// 4-octet markers, PAD): ISA-L spends 30-50 ns on each of those, more than
// on a 4 KiB payload per octet.  Pieces below small_piece go through the
// SSE4.2 crc32 instruction inline (same polynomial, same register form).
#include "emulator/wire/crc32c.h"

#include <isa-l/crc.h>

#include <climits>
#include <cstring>

#if defined(__x86_64__)
#include <immintrin.h>
#endif

namespace iwemu::wire {
namespace {

constexpr size_t small_piece = 256;

#if defined(__x86_64__)
__attribute__((target("sse4.2"))) uint32_t crc_small_sse42(uint32_t reg, const uint8_t* p, size_t n)
{
    uint64_t r = reg;
    for (; n >= 8; n -= 8, p += 8) {
        uint64_t v;
        std::memcpy(&v, p, sizeof v);
        r = _mm_crc32_u64(r, v);
    }
    uint32_t r32 = static_cast<uint32_t>(r);
    if (n >= 4) {
        uint32_t v;
        std::memcpy(&v, p, sizeof v);
        r32 = _mm_crc32_u32(r32, v);
        n -= 4;
        p += 4;
    }
    for (; n > 0; --n, ++p) r32 = _mm_crc32_u8(r32, *p);
    return r32;
}

bool cpu_supports_sse42()
{
    __builtin_cpu_init();  // may run before libgcc's own constructor
    return __builtin_cpu_supports("sse4.2");
}

bool cpu_supports_avx()
{
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx");
}

// Zero-initialised (false: ISA-L only) until this file's initialisers run.
const bool have_sse42 = cpu_supports_sse42();
const bool have_avx = cpu_supports_avx();

// ISA-L's AVX-512 CRC kernel returns with the upper vector state dirty; the
// legacy-SSE code that follows (our small copies) then stalls badly — it
// doubled the receive time of a 4 KiB FPDU.  Clean the state on return.
__attribute__((target("avx"))) void clear_upper_vector_state() { _mm256_zeroupper(); }
#endif

uint32_t crc_isal(uint32_t reg, const uint8_t* data, size_t len)
{
    // crc32_iscsi takes an int length; FPDUs are < 64 KiB but callers may CRC more.
    while (len > 0) {
        const size_t n = len > size_t{INT_MAX} ? size_t{INT_MAX} : len;
        reg = crc32_iscsi(const_cast<uint8_t*>(data), static_cast<int>(n), reg);
        data += n;
        len -= n;
    }
#if defined(__x86_64__)
    if (have_avx) clear_upper_vector_state();
#endif
    return reg;
}

}  // namespace

void Crc32c::update(const uint8_t* data, size_t len)
{
#if defined(__x86_64__)
    if (len < small_piece && have_sse42) {
        reg_ = crc_small_sse42(reg_, data, len);
        return;
    }
#endif
    reg_ = crc_isal(reg_, data, len);
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
