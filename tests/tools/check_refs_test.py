#!/usr/bin/python3
"""tools/check_refs.py on a small made-up tree: each kind of dangling reference is reported
with its file and line, and the references that resolve are not."""

import os
import subprocess
import sys
import tempfile
import unittest

CHECKER = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "tools",
                       "check_refs.py")


def write(root, rel, text):
    path = os.path.join(root, rel)
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w", encoding="utf-8") as f:
        f.write(text)


def run(root):
    done = subprocess.run([sys.executable, CHECKER, root], capture_output=True, text=True,
                          check=False)
    findings = [l for l in done.stdout.splitlines() if not l.startswith("check_refs:")]
    return done.returncode, findings


class CheckRefsTest(unittest.TestCase):

    def tree(self):
        root = tempfile.mkdtemp(prefix="check_refs_test.")
        self.addCleanup(subprocess.run, ["rm", "-rf", root], check=False)
        write(root, "README.md", "# Project\n\nSee [the manual](docs/manual.md#the-log) and "
              "ARCHITECTURE.md.\n\n## Two commands\n")
        write(root, "ARCHITECTURE.md", "# Architecture\n")
        write(root, "docs/manual.md", "# Manual\n\n## The log\n\n**When the disk fills up** "
              "(or fails): ...\n")
        write(root, "docs/algorithms.md", "# Algorithms\n\n## 1. Kernels\n\n### 1.2 The user "
              "kernel\n\n### 1.3 Its feature map\n")
        write(root, "core/a.h", "// The user kernel (docs/algorithms.md §1.2-1.3); see\n"
              "// docs/manual.md \"When the disk fills\" and core/b.h; examples in\n"
              "// sim/presets/NAME.textproto and core/b.{h,cc}.\n")
        write(root, "core/b.h", "// nothing\n")
        return root

    def test_a_tree_whose_references_resolve_passes(self):
        code, findings = run(self.tree())
        self.assertEqual(findings, [])
        self.assertEqual(code, 0)

    def test_each_kind_of_dangling_reference_is_reported_where_it_is(self):
        root = self.tree()
        write(root, "core/c.h", "\n".join([
            "// docs/algorithms.md §1.4 explains it.",
            "// See core/missing.h.",
            "// As docs/manual.md's \"Cluster mode\" says.",
            "// Added for issue 12.",
            "// PAPERS.md has it.",
        ]) + "\n")
        write(root, "docs/more.md", "# More\n\n[gone](manual.md#no-such-heading) "
              "[absent](nowhere.md)\n")
        write(root, "core/long.cc", "int x;\n" * 701)
        write(root, "README.md", "# Project\n" + "line\n" * 300)
        code, findings = run(root)
        self.assertEqual(code, 1)
        expected = [
            "README.md: size: 301 lines (at most 300)",
            "core/c.h:1: section: docs/algorithms.md has no §1.4",
            "core/c.h:2: path: core/missing.h does not exist",
            'core/c.h:3: heading: docs/manual.md has no section "Cluster mode"',
            "core/c.h:4: tracker: issue 12",
            "core/c.h:5: path: PAPERS.md does not exist",
            "core/long.cc: size: 701 lines (at most 700)",
            "docs/more.md:3: link: no heading #no-such-heading in docs/manual.md",
            "docs/more.md:3: link: nowhere.md does not exist",
        ]
        self.assertEqual(sorted(findings), sorted(expected))


if __name__ == "__main__":
    unittest.main()
