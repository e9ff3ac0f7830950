// IWEMU_FAULTS rule parser (emulator/faults/fault_rules.h): what is accepted,
// and every mistake reported with its position.
#include <gtest/gtest.h>

#include <variant>

#include "emulator/config.h"
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

TEST(FaultRules, NewKinds)
{
    const RuleSet s = ok("corrupt:qn,opcode=send,fpdu=2; delay:250,p=0.5; stall:1000,ms=20; late_read:300,qp=9;"
                         "reject:go away,lport=4000,fpdu=2; reject; corrupt:stag,opcode=write");
    ASSERT_EQ(s.rules.size(), 7u);
    EXPECT_EQ(s.rules[0].action, Action::corrupt);
    EXPECT_EQ(s.rules[0].field, Field::qn);
    EXPECT_EQ(s.rules[0].direction, Direction::tx);
    EXPECT_EQ(s.rules[1].action, Action::delay);
    EXPECT_EQ(s.rules[1].hold_ms, 250u);
    EXPECT_EQ(s.rules[1].direction, Direction::rx);
    EXPECT_EQ(s.rules[2].action, Action::stall);
    EXPECT_EQ(s.rules[2].after_ms, 20u);
    EXPECT_EQ(s.rules[3].action, Action::late_read);
    EXPECT_EQ(s.rules[3].opcode, 1);
    EXPECT_EQ(s.rules[3].hold_ms, 300u);
    EXPECT_EQ(s.rules[4].action, Action::reject);
    EXPECT_EQ(s.rules[4].private_data, "go away");
    EXPECT_EQ(s.rules[4].local_port, 4000);
    EXPECT_EQ(s.rules[5].private_data, "");
    EXPECT_EQ(s.rules[6].field, Field::stag);
    EXPECT_EQ(bad("delay:0").position, 7u);
    EXPECT_EQ(bad("stall").position, 6u);
    EXPECT_EQ(bad("corrupt:crc").position, 9u);
    EXPECT_NE(bad("delay:10,dir=tx").message.find("received"), std::string::npos);
    EXPECT_NE(bad("corrupt:qn,dir=rx").message.find("received"), std::string::npos);
    EXPECT_NE(bad("late_read:5,opcode=send").message.find("Read Requests"), std::string::npos);
    EXPECT_NE(bad("reject:x,opcode=send").message.find("reject takes"), std::string::npos);
    EXPECT_NE(bad("corrupt:stag,opcode=send").message.find("no stag"), std::string::npos);
    EXPECT_NE(bad("corrupt:msn,opcode=write").message.find("no msn"), std::string::npos);
}

// Each field's alteration, read back by the wire decoders, gives the
// Terminate header_field_code() promises: the flip changes the field it
// names and only that.
TEST(FaultRules, HeaderFieldFlips)
{
    using wire::TerminateLayer;
    EXPECT_EQ(header_field_code(Field::qn, false), (wire::TerminateCode{TerminateLayer::ddp, 2, 0x01}));
    EXPECT_EQ(header_field_code(Field::ddp_version, true), (wire::TerminateCode{TerminateLayer::ddp, 1, 0x04}));
    EXPECT_EQ(header_field_code(Field::ddp_version, false), (wire::TerminateCode{TerminateLayer::ddp, 2, 0x06}));
    EXPECT_EQ(header_field_code(Field::rdmap_version, false), (wire::TerminateCode{TerminateLayer::rdmap, 2, 0x05}));
    EXPECT_EQ(header_field_code(Field::msn, false), (wire::TerminateCode{TerminateLayer::ddp, 2, 0x03}));
    EXPECT_EQ(header_field_code(Field::mo, false), (wire::TerminateCode{TerminateLayer::ddp, 2, 0x04}));
    EXPECT_EQ(header_field_code(Field::stag, true), (wire::TerminateCode{TerminateLayer::ddp, 1, 0x00}));
    // Offsets: DDP control at 2 (DV low bits), RDMAP control at 3 (RV top
    // bits), untagged QN 8..11, MSN 12..15, MO 16..19, tagged STag 4..7.
    EXPECT_EQ(field_flip(Field::ddp_version), (std::pair<size_t, uint8_t>{2, 0x03}));
    EXPECT_EQ(field_flip(Field::rdmap_version).first, 3u);
    EXPECT_EQ(field_flip(Field::rdmap_version).second & 0x3F, 0);
    EXPECT_GE(field_flip(Field::qn).first, 8u);
    EXPECT_LE(field_flip(Field::qn).first, 11u);
    EXPECT_GE(field_flip(Field::msn).first, 12u);
    EXPECT_LE(field_flip(Field::msn).first, 15u);
    EXPECT_GE(field_flip(Field::mo).first, 16u);
    EXPECT_LE(field_flip(Field::mo).first, 19u);
    EXPECT_GE(field_flip(Field::stag).first, 4u);
    EXPECT_LE(field_flip(Field::stag).first, 7u);
}

// A bad rule is kept as a fatal error for whoever starts (iwemu-run, the
// emulator), with the value and a caret; a good value replaces it.
TEST(FaultRules, ConfigKeepsTheErrorForStartUp)
{
    Config cfg;
    std::string err;
    EXPECT_FALSE(cfg.set("faults", "crc,fdpu=3", &err));
    EXPECT_NE(err.find("position 5"), std::string::npos) << err;
    EXPECT_EQ(cfg.faults, "");
    EXPECT_EQ(cfg.faults_error.substr(0, 11), "position 5:");
    EXPECT_NE(cfg.faults_error.find("\n  crc,fdpu=3\n      ^"), std::string::npos) << cfg.faults_error;
    EXPECT_TRUE(cfg.set("faults", "crc,fpdu=3", &err));
    EXPECT_EQ(cfg.faults, "crc,fpdu=3");
    EXPECT_TRUE(cfg.faults_error.empty());
    Config from_file;
    EXPECT_EQ(parse_config_text("faults = stall:x\n", from_file, nullptr), 1);
    EXPECT_NE(from_file.faults_error.find("position 7"), std::string::npos) << from_file.faults_error;
}

}  // namespace
}  // namespace iwemu::faults
