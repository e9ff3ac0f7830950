// The `iwemu decode` subcommand: command line, input, exit status.
#pragma once

namespace iwemu::tools {

// argv[0] is "decode".  Returns the process exit status: 0 decoded,
// 2 malformed stream, 1 usage or I/O error.
int decode_command(int argc, char** argv);

void print_decode_usage(bool to_stderr);

}  // namespace iwemu::tools
