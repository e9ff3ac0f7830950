// `iwemu`: the project's command-line tool; one subcommand per task.
#include <cstdio>
#include <string_view>

#include "tools/decode_command.h"
#include "tools/status_command.h"

namespace {

void usage(std::FILE* out)
{
    std::fputs(
        "usage: iwemu <command> [options]\n"
        "\n"
        "commands:\n"
        "  decode   decode one direction of an iWARP (MPA/DDP/RDMAP) TCP byte stream\n"
        "  status   every iwemu process of this user: devices, QPs, state, peers, counters\n"
        "\n"
        "iwemu <command> --help shows the options of a command.\n",
        out);
}

}  // namespace

int main(int argc, char** argv)
{
    if (argc < 2) {
        usage(stderr);
        return 1;
    }
    const std::string_view cmd = argv[1];
    if (cmd == "-h" || cmd == "--help" || cmd == "help") {
        usage(stdout);
        return 0;
    }
    if (cmd == "decode")
        return iwemu::tools::decode_command(argc - 1, argv + 1);
    if (cmd == "status")
        return iwemu::tools::status_command(argc - 1, argv + 1);
    std::fprintf(stderr, "iwemu: unknown command '%s'\n", argv[1]);
    usage(stderr);
    return 1;
}
