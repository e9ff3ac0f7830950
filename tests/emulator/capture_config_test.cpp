// IWEMU_CAPTURE settings: the config-file keys, their bad values, and the
// %p expansion of the path (emulator/config.cpp, emulator/capture/stream_capture.h).
#include <gtest/gtest.h>

#include "emulator/capture/stream_capture.h"
#include "emulator/config.h"

namespace iwemu {
namespace {

TEST(CaptureConfig, KeysParse)
{
    Config c;
    std::string report;
    EXPECT_EQ(parse_config_text("capture = /tmp/run-%p.pcapng\ncapture_snaplen = 128\ncapture_payload = 64\n"
                                "capture_max_size = 100M\ncapture_files = 5\n",
                                c, &report),
              0)
        << report;
    EXPECT_EQ(c.capture.path, "/tmp/run-%p.pcapng");
    EXPECT_EQ(c.capture.snaplen, 128u);
    EXPECT_EQ(c.capture.payload_keep, 64u);
    EXPECT_EQ(c.capture.max_file_bytes, 100u << 20);
    EXPECT_EQ(c.capture.files, 5u);
    EXPECT_EQ(parse_config_text("capture_payload = all\ncapture_max_size = 0\n", c, &report), 0) << report;
    EXPECT_EQ(c.capture.payload_keep, UINT32_MAX);
    EXPECT_EQ(c.capture.max_file_bytes, 0u);
}

TEST(CaptureConfig, BadValuesAreReportedWithWhere)
{
    Config c;
    std::string report;
    EXPECT_EQ(parse_config_text("capture = /tmp/a%d.pcapng\n", c, &report), 1);
    EXPECT_NE(report.find("line 1"), std::string::npos) << report;
    EXPECT_NE(report.find("'%d' at position 7"), std::string::npos) << report;
    EXPECT_TRUE(c.capture.path.empty());
    report.clear();
    EXPECT_EQ(parse_config_text("capture_snaplen = 10\ncapture_max_size = 1K\ncapture_max_size = 5X\n"
                                "capture_files = 0\ncapture_payload = some\n",
                                c, &report),
              5)
        << report;
}

TEST(CaptureConfig, PathExpansion)
{
    EXPECT_EQ(capture::expand_path("/tmp/c-%p.pcapng", 1234), "/tmp/c-1234.pcapng");
    EXPECT_EQ(capture::expand_path("100%%-%p", 7), "100%-7");
    EXPECT_EQ(capture::check_path("/x/%p/%%"), "");
    EXPECT_NE(capture::check_path("/x/%"), "");
}

}  // namespace
}  // namespace iwemu
