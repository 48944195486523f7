#include "core/base/command_line.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>

#include "absl/flags/commandlineflag.h"
#include "absl/flags/parse.h"
#include "absl/flags/reflection.h"
#include "absl/flags/usage.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace graphbandit {
namespace {

bool IsHelp(absl::string_view name) {
  return name == "help" || name == "helpfull" || name == "helpshort" || name == "h" || name == "?";
}

[[noreturn]] void UsageError(absl::string_view program, const std::string& what) {
  std::fprintf(stderr, "%.*s: %s (see %.*s --help)\n", static_cast<int>(program.size()),
               program.data(), what.c_str(), static_cast<int>(program.size()), program.data());
  std::exit(kExitUsage);
}

}  // namespace

std::string ProgramHelp(absl::string_view usage, const std::vector<std::string>& flag_files) {
  std::vector<absl::CommandLineFlag*> flags;
  for (const auto& [name, flag] : absl::GetAllFlags()) {
    const std::string file = flag->Filename();
    for (const std::string& wanted : flag_files) {
      if (absl::EndsWith(file, wanted)) {
        flags.push_back(flag);
        break;
      }
    }
  }
  std::sort(flags.begin(), flags.end(), [](absl::CommandLineFlag* a, absl::CommandLineFlag* b) {
    return a->Name() < b->Name();
  });
  std::string help = absl::StrCat(usage, "\n\nFlags:\n");
  for (absl::CommandLineFlag* flag : flags) {
    std::string default_value = flag->DefaultValue();
    if (flag->IsOfType<std::string>()) default_value = absl::StrCat("\"", default_value, "\"");
    absl::StrAppend(&help, "  --", flag->Name(), "  ", flag->Help(), " (default: ", default_value,
                    ")\n");
  }
  absl::StrAppend(&help, "  --help  Print this help and exit.\n");
  return help;
}

std::vector<char*> ParseProgramCommandLine(int argc, char** argv, absl::string_view program,
                                           absl::string_view usage,
                                           const std::vector<std::string>& flag_files) {
  absl::SetProgramUsageMessage(usage);
  // Checked before Abseil parses, which would exit with status 1 for these.
  for (int i = 1; i < argc; ++i) {
    absl::string_view arg = argv[i];
    if (arg == "--") break;
    if (arg.size() < 2 || arg[0] != '-') continue;  // a positional argument
    arg.remove_prefix(arg[1] == '-' ? 2 : 1);
    const size_t equals = arg.find('=');
    const absl::string_view name = arg.substr(0, equals);
    if (IsHelp(name)) {
      const std::string help = ProgramHelp(usage, flag_files);
      std::fwrite(help.data(), 1, help.size(), stdout);
      std::exit(0);
    }
    absl::CommandLineFlag* flag = absl::FindCommandLineFlag(name);
    if (flag == nullptr && absl::StartsWith(name, "no")) {
      absl::CommandLineFlag* negated = absl::FindCommandLineFlag(name.substr(2));
      if (negated != nullptr && negated->IsOfType<bool>() && equals == absl::string_view::npos) {
        continue;  // --noflag
      }
    }
    if (flag == nullptr) UsageError(program, absl::StrCat("unknown flag --", name));
    std::string value;
    if (equals != absl::string_view::npos) {
      value = std::string(arg.substr(equals + 1));
    } else if (flag->IsOfType<bool>()) {
      continue;  // --flag means true
    } else if (i + 1 < argc) {
      value = argv[++i];  // --flag value
    } else {
      UsageError(program, absl::StrCat("flag --", name, " needs a value"));
    }
    std::string error;
    if (!flag->ParseFrom(value, &error)) {
      UsageError(program, absl::StrCat("bad value for --", name, ": ", error));
    }
  }
  return absl::ParseCommandLine(argc, argv);
}

}  // namespace graphbandit
