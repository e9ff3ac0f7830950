// RFC 7306 §6.2 Immediate Data message: the known answer V-X1 (VECTORS §5),
// the verbs imm32 placement in the 8-octet field, and what decode refuses.
#include <gtest/gtest.h>

#include <array>
#include <cstdint>
#include <vector>

#include "emulator/wire/immediate_data.h"
#include "emulator/wire/rdmap_message.h"
#include "tests/unit/wire/wire_test_util.h"

namespace iwemu::wire {
namespace {

using test::hex;

// V-X1 without ULPDU_Length and CRC: opcode 8, QN 0, MSN 3, data 01..08.
const std::vector<uint8_t> v_x1 = hex("41 48 00 00 00 00 00 00 00 00 00 00 00 03 00 00 00 00 01 02 03 04 05 06 07 08");

TEST(ImmediateDataMessage, EncodesV_X1)
{
    ImmediateDataMessage m;
    m.msn = 3;
    m.data.data = {1, 2, 3, 4, 5, 6, 7, 8};
    std::array<uint8_t, immediate_data_ulpdu_size> out{};
    ASSERT_EQ(encode_immediate_data_message(m, out), 26u);
    EXPECT_EQ(std::vector<uint8_t>(out.begin(), out.end()), v_x1);
}

TEST(ImmediateDataMessage, DecodesV_X1)
{
    const auto m = decode_immediate_data_message(v_x1);
    ASSERT_TRUE(m);
    EXPECT_FALSE(m->solicited_event);
    EXPECT_EQ(m->msn, 3u);
    EXPECT_EQ(m->data.data, (std::array<uint8_t, 8>{1, 2, 3, 4, 5, 6, 7, 8}));
    EXPECT_EQ(validate_rdmap_segment(decode_rdmap_segment(v_x1)->ddp, v_x1.size(), {.rfc7306 = true}),
              std::nullopt);
}

TEST(ImmediateDataMessage, SolicitedEventIsOpcode9)
{
    ImmediateDataMessage m{true, 0x01020304, immediate_data_from_imm32(0xA1B2C3D4)};
    std::array<uint8_t, immediate_data_ulpdu_size> out{};
    ASSERT_EQ(encode_immediate_data_message(m, out), 26u);
    EXPECT_EQ(out[0], 0x41);  // untagged, L=1, DV=1
    EXPECT_EQ(out[1], 0x49);  // RV=1, opcode 1001b
    EXPECT_EQ(out[13], 0x04);  // MSN low octet
    const auto back = decode_immediate_data_message(out);
    ASSERT_TRUE(back);
    EXPECT_EQ(*back, m);
}

TEST(ImmediateDataMessage, Imm32TakesTheFirstFourOctetsInNetworkOrder)
{
    const ImmediateData d = immediate_data_from_imm32(0x11223344);
    EXPECT_EQ(d.data, (std::array<uint8_t, 8>{0x11, 0x22, 0x33, 0x44, 0, 0, 0, 0}));
    EXPECT_EQ(imm32_from_immediate_data(d), 0x11223344u);
    // Octets 4..7 are ignored on receipt.
    ImmediateData peer;
    peer.data = {0xDE, 0xAD, 0xBE, 0xEF, 9, 9, 9, 9};
    EXPECT_EQ(imm32_from_immediate_data(peer), 0xDEADBEEFu);
}

TEST(ImmediateDataMessage, OpcodePredicate)
{
    for (uint8_t op = 0; op < 16; ++op) EXPECT_EQ(rdmap_opcode_is_immediate_data(op), op == 0x8 || op == 0x9) << int(op);
}

TEST(ImmediateDataMessage, EncodeNeedsRoom)
{
    std::array<uint8_t, immediate_data_ulpdu_size - 1> small{};
    EXPECT_EQ(encode_immediate_data_message({}, small), 0u);
}

TEST(ImmediateDataMessage, DecodeRefusesAnythingElse)
{
    auto bad = [](size_t at, uint8_t value) {
        std::vector<uint8_t> u = v_x1;
        u[at] = value;
        return decode_immediate_data_message(u).has_value();
    };
    EXPECT_FALSE(bad(0, 0x01));   // L = 0
    EXPECT_FALSE(bad(0, 0xC1));   // tagged
    EXPECT_FALSE(bad(1, 0x43));   // Send
    EXPECT_FALSE(bad(1, 0x4A));   // Atomic Request
    EXPECT_FALSE(bad(1, 0x08));   // RV = 0
    EXPECT_FALSE(bad(9, 0x01));   // QN 1
    EXPECT_FALSE(bad(17, 0x01));  // MO 1
    std::vector<uint8_t> longer = v_x1;
    longer.push_back(0);
    EXPECT_FALSE(decode_immediate_data_message(longer));
    EXPECT_FALSE(decode_immediate_data_message(std::span(v_x1).first(25)));
    EXPECT_FALSE(decode_immediate_data_message({}));
}

}  // namespace
}  // namespace iwemu::wire
