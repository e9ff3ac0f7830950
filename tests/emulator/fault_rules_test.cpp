// IWEMU_FAULTS rule parser (emulator/faults/fault_rules.h): what is accepted,
// and every mistake reported with its position.
#include <gtest/gtest.h>

#include <variant>

#include "emulator/faults/fault_rules.h"

namespace iwemu::faults {
namespace {

RuleSet ok(std::string_view text)
{
    auto r = parse_rules(text);
    if (auto* e = std::get_if<ParseError>(&r)) ADD_FAILURE() << text << ": position " << e->position << ": " << e->message;
    return std::holds_alternative<RuleSet>(r) ? std::get<RuleSet>(r) : RuleSet{};
}

ParseError bad(std::string_view text)
{
    auto r = parse_rules(text);
    EXPECT_TRUE(std::holds_alternative<ParseError>(r)) << text;
    return std::holds_alternative<ParseError>(r) ? std::get<ParseError>(r) : ParseError{};
}

TEST(FaultRules, WhatWhereWhen)
{
    const RuleSet s = ok("crc,fpdu=10; drop:rst, octets=1M ,opcode=send;terminate:2/0/0x02,qp=77,dir=tx,ms=250;"
                         "drop:fin,dir=rx,opcode=read_request,p=0.25,lport=5000,rport=6000,port=7; seed=42");
    ASSERT_EQ(s.rules.size(), 4u);
    EXPECT_EQ(s.seed, 42u);
    EXPECT_EQ(s.rules[0].action, Action::corrupt_crc);
    EXPECT_EQ(s.rules[0].nth_fpdu, 10u);
    EXPECT_EQ(s.rules[0].text, "crc,fpdu=10");
    EXPECT_EQ(s.rules[1].action, Action::drop_rst);
    EXPECT_EQ(s.rules[1].after_octets, 1u << 20);
    EXPECT_EQ(s.rules[1].opcode, opcode_send);
    EXPECT_EQ(s.rules[2].action, Action::terminate);
    EXPECT_EQ(s.rules[2].terminate, (wire::TerminateCode{wire::TerminateLayer::llp, 0, 2}));
    EXPECT_EQ(s.rules[2].qpn, 77u);
    EXPECT_EQ(s.rules[2].after_ms, 250u);
    EXPECT_EQ(s.rules[3].action, Action::drop_fin);
    EXPECT_EQ(s.rules[3].direction, Direction::rx);
    EXPECT_EQ(s.rules[3].opcode, 1);
    EXPECT_DOUBLE_EQ(*s.rules[3].probability, 0.25);
    EXPECT_EQ(s.rules[3].local_port, 5000);
    EXPECT_EQ(s.rules[3].remote_port, 6000);
    EXPECT_EQ(s.rules[3].any_port, 7);
    EXPECT_EQ(ok("lose,fpdu=1").rules[0].action, Action::lose);
    EXPECT_TRUE(ok("").rules.empty());
    EXPECT_TRUE(ok(" ; ;").rules.empty());
}

TEST(FaultRules, OpcodeClasses)
{
    EXPECT_TRUE(opcode_matches(opcode_send, 0x3));
    EXPECT_TRUE(opcode_matches(opcode_send, 0x6));
    EXPECT_FALSE(opcode_matches(opcode_send, 0x7));
    EXPECT_TRUE(opcode_matches(2, 0x2));
    EXPECT_FALSE(opcode_matches(2, 0x1));
}

TEST(FaultRules, MistakesHaveTheirPosition)
{
    auto e = bad("crc,fdpu=10");
    EXPECT_EQ(e.position, 5u);
    EXPECT_NE(e.message.find("unknown condition 'fdpu'"), std::string::npos) << e.message;
    e = bad("crc,fpdu=10;drop:xyz");
    EXPECT_EQ(e.position, 18u) << e.message;
    e = bad("crc;  explode,fpdu=1");
    EXPECT_EQ(e.position, 7u);
    EXPECT_NE(e.message.find("unknown action 'explode'"), std::string::npos);
    e = bad("terminate:3/0/1");
    EXPECT_EQ(e.position, 11u) << e.message;
    e = bad("terminate:2/0");
    EXPECT_EQ(e.position, 11u) << e.message;
    e = bad("crc,p=1.5");
    EXPECT_EQ(e.position, 7u);
    e = bad("crc,fpdu=0");
    EXPECT_EQ(e.position, 10u);
    e = bad("crc,opcode=bogus");
    EXPECT_EQ(e.position, 12u);
    e = bad("crc,dir=rx");
    EXPECT_EQ(e.position, 1u);
    e = bad("crc,fpdu=3,p=0.5");
    EXPECT_NE(e.message.find("exclude"), std::string::npos);
    e = bad("crc,octets=12Q");
    EXPECT_EQ(e.position, 12u);
    e = bad("seed=abc");
    EXPECT_EQ(e.position, 6u);
    e = bad("crc,port=0");
    EXPECT_EQ(e.position, 10u);
    e = bad("lose:x");
    EXPECT_EQ(e.position, 6u);
    e = bad("crc,fpdu");
    EXPECT_EQ(e.position, 5u);
}

}  // namespace
}  // namespace iwemu::faults
