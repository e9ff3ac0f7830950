// The half-open cap setting (key max_half_open, IWEMU_MAX_HALF_OPEN): parsed,
// range-checked, overridden by the environment.
#include <stdlib.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <string>

#include "emulator/cm/cm_settings.h"
#include "emulator/config.h"

namespace iwemu::test {
namespace {

TEST(ConfigMaxHalfOpen, DefaultMatchesTheCmDefault)
{
    EXPECT_EQ(Config{}.max_half_open, cm::CmSettings{}.max_half_open_per_listener);
}

TEST(ConfigMaxHalfOpen, FileValueAndBounds)
{
    Config c;
    std::string report;
    EXPECT_EQ(parse_config_text("max_half_open = 8   # small server\n", c, &report), 0) << report;
    EXPECT_EQ(c.max_half_open, 8u);
    std::string err;
    EXPECT_TRUE(c.set("max_half_open", "1", &err)) << err;
    EXPECT_EQ(c.max_half_open, 1u);
    EXPECT_TRUE(c.set("max_half_open", "65536", &err)) << err;
    EXPECT_EQ(c.max_half_open, 65536u);
}

TEST(ConfigMaxHalfOpen, BadValuesAreRefusedWithAClearErrorAndChangeNothing)
{
    for (const char* bad : {"0", "65537", "-1", "abc", "", "4x", "99999999999"}) {
        Config c;
        std::string err;
        EXPECT_FALSE(c.set("max_half_open", bad, &err)) << bad;
        EXPECT_EQ(c.max_half_open, 64u) << bad;
        EXPECT_NE(err.find("max_half_open"), std::string::npos) << err;
        EXPECT_NE(err.find(std::string("'") + bad + "'"), std::string::npos) << err;
    }
    Config c;
    std::string report;
    EXPECT_EQ(parse_config_text("max_half_open = 0\n", c, &report), 1);
    EXPECT_NE(report.find("line 1"), std::string::npos) << report;
    EXPECT_EQ(c.max_half_open, 64u);
}

TEST(ConfigMaxHalfOpen, EnvironmentOverridesFileAndABadOneIsIgnored)
{
    char path[] = "/tmp/iwemu_cfg_XXXXXX";
    const int fd = mkstemp(path);
    ASSERT_GE(fd, 0);
    const char text[] = "max_half_open = 7\n";
    ASSERT_EQ(write(fd, text, sizeof text - 1), static_cast<ssize_t>(sizeof text - 1));
    close(fd);
    setenv("IWEMU_CONFIG", path, 1);

    setenv("IWEMU_MAX_HALF_OPEN", "5", 1);
    const Config from_env = load_config();
    setenv("IWEMU_MAX_HALF_OPEN", "0", 1);  // out of range: reported on stderr, file value kept
    const Config bad_env = load_config();

    unsetenv("IWEMU_MAX_HALF_OPEN");
    unsetenv("IWEMU_CONFIG");
    unlink(path);
    EXPECT_EQ(from_env.max_half_open, 5u);
    EXPECT_EQ(bad_env.max_half_open, 7u);
}

}  // namespace
}  // namespace iwemu::test
