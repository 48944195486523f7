// How every graphbandit program reads its command line (the server, the client, the load
// generator, the simulator, the benchmark), on Abseil flags:
//  * --help (also -h, --helpfull, --helpshort) prints the usage and the program's own flags,
//    with their defaults, on stdout and exits 0;
//  * an unknown flag, a bad value or a missing value prints one line naming it on stderr and
//    exits 64 (EX_USAGE), instead of Abseil's exit status 1;
//  * no build paths appear in either.
// A library of its own (graphbandit_command_line): core itself parses no command line.
#ifndef GRAPHBANDIT_CORE_BASE_COMMAND_LINE_H_
#define GRAPHBANDIT_CORE_BASE_COMMAND_LINE_H_

#include <string>
#include <vector>

#include "absl/strings/string_view.h"

namespace graphbandit {

inline constexpr int kExitUsage = 64;  // EX_USAGE (sysexits.h)

// Parses argv as above. `flag_files` are the source files (paths from the repository root,
// e.g. "server/main.cc") whose flags --help lists. Returns the positional arguments, argv[0]
// first.
std::vector<char*> ParseProgramCommandLine(int argc, char** argv, absl::string_view program,
                                           absl::string_view usage,
                                           const std::vector<std::string>& flag_files);

// The help text ParseProgramCommandLine prints for --help.
std::string ProgramHelp(absl::string_view usage, const std::vector<std::string>& flag_files);

}  // namespace graphbandit

#endif  // GRAPHBANDIT_CORE_BASE_COMMAND_LINE_H_
