// Helpers shared by the wire unit tests: hex literals -> bytes.
#pragma once

#include <cstdint>
#include <stdexcept>
#include <string_view>
#include <vector>

namespace iwemu::wire::test {

// "4d 50 41 ..." (spaces/newlines ignored) -> bytes.
inline std::vector<uint8_t> hex(std::string_view s)
{
    std::vector<uint8_t> out;
    int hi = -1;
    for (char c : s) {
        int v;
        if (c >= '0' && c <= '9') v = c - '0';
        else if (c >= 'a' && c <= 'f') v = c - 'a' + 10;
        else if (c >= 'A' && c <= 'F') v = c - 'A' + 10;
        else continue;
        if (hi < 0) {
            hi = v;
        } else {
            out.push_back(static_cast<uint8_t>(hi << 4 | v));
            hi = -1;
        }
    }
    if (hi >= 0) throw std::invalid_argument("odd number of hex digits");
    return out;
}

}  // namespace iwemu::wire::test
