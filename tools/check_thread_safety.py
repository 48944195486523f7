#!/usr/bin/python3
"""Compiles every project source with clang's thread-safety analysis as errors.

The locking rules are written into the code as Abseil's annotations (ABSL_GUARDED_BY,
ABSL_EXCLUSIVE_LOCKS_REQUIRED, ...; core/base/sync.h for core's own locks). GCC ignores them;
clang checks them. This runs clang++ -fsyntax-only over the compile commands of an existing
build (CMAKE_EXPORT_COMPILE_COMMANDS), so it needs the build's generated protobuf headers but
writes no objects.

usage: tools/check_thread_safety.py BUILD_DIR [--jobs N]
"""
import argparse
import concurrent.futures
import json
import os
import shlex
import subprocess
import sys

FLAGS = ["-fsyntax-only", "-Wthread-safety", "-Wthread-safety-beta", "-Werror=thread-safety",
         "-Werror=thread-safety-beta", "-Wno-unknown-warning-option"]
# Dropped from the GCC command lines: outputs, dependency files, and warnings-as-errors (clang
# warns about other things than GCC; this check is about locking only, -Werror stays GCC's job).
DROP_WITH_VALUE = {"-o", "-MF", "-MT", "-MQ"}
DROP = {"-MD", "-MMD", "-c", "-Werror"}


def clang_command(entry, source_dir):
    words = shlex.split(entry["command"]) if "command" in entry else list(entry["arguments"])
    # ccache (or another launcher) may come first: keep what follows the compiler.
    while words and os.path.basename(words[0]) in ("ccache", "sccache"):
        words = words[1:]
    out, skip = ["clang++"], False
    for word in words[1:]:
        if skip:
            skip = False
        elif word in DROP_WITH_VALUE:
            skip = True
        elif word in DROP or word == entry["file"]:
            pass
        else:
            out.append(word)
    return out + FLAGS + [entry["file"]]


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("build_dir")
    parser.add_argument("--jobs", type=int, default=os.cpu_count() or 1)
    args = parser.parse_args()
    build_dir = os.path.abspath(args.build_dir)
    source_dir = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    with open(os.path.join(build_dir, "compile_commands.json")) as f:
        entries = json.load(f)
    checked = {}
    for entry in entries:
        path = os.path.normpath(os.path.join(entry["directory"], entry["file"]))
        # The project's own sources only (not protoc's output in the build tree), once each.
        if not path.startswith(source_dir + os.sep) or path.startswith(build_dir + os.sep):
            continue
        checked.setdefault(path, entry)
    if not checked:
        print("check_thread_safety: no project sources in compile_commands.json", file=sys.stderr)
        return 2

    def run(item):
        path, entry = item
        result = subprocess.run(clang_command(entry, source_dir), cwd=entry["directory"],
                                capture_output=True, text=True)
        return path, result.returncode, result.stderr

    failures = 0
    with concurrent.futures.ThreadPoolExecutor(max_workers=args.jobs) as pool:
        for path, code, stderr in pool.map(run, sorted(checked.items())):
            if code != 0:
                failures += 1
                print(f"--- {os.path.relpath(path, source_dir)}\n{stderr}", file=sys.stderr)
    print(f"check_thread_safety: {len(checked)} files, {failures} with errors")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
