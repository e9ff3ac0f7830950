// The `iwemu status` subcommand: every iwemu process of this user, its QPs
// and their counters, from the status segments (emulator/status/).
#pragma once

namespace iwemu::tools {

// argv[0] is "status".  Returns 0, or 1 on a usage error.
int status_command(int argc, char** argv);

}  // namespace iwemu::tools
