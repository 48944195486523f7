#!/usr/bin/python3
"""Checks that what the code and docs point at exists, and that sizes stay within the house rules.

Run from anywhere: `tools/check_refs.py [ROOT]` (ROOT defaults to the repository holding this
script). It reads every text file under ROOT that is part of the project (not build trees, not
.git) and reports, with file:line:

  path       a repository path named in a comment or doc (core/..., docs/..., tools/..., a
             top-level *.md) that does not exist; `*` globs must match something, and names
             with placeholders (<preset>, {a,b}, $var) are skipped;
  link       a relative markdown link whose file, or whose #anchor (GitHub's heading slugs), does
             not exist;
  heading    a quoted section of a document ( README "Try it", docs/operations.md's
             "When the disk fills" ) that is not the start of one of its headings;
  section    docs/algorithms.md §N.M (and ranges §4.4-4.6) naming a section it does not have;
  tracker    a tracker number ("issue" and a number, "(#" and a number) in a comment or doc: say what the work was;
  size       a C++ or Python source over 700 lines, or a README.md entry page over 300 lines.

Exit status 0 when nothing is found, 1 otherwise (each finding on its own line).
"""

import glob
import os
import re
import sys

MAX_SOURCE_LINES = 700
MAX_README_LINES = 300

TOP_DIRS = ("bench", "client", "core", "deploy", "docs", "proto", "results", "server", "sim",
            "tests", "tools", ".ci")
TEXT_SUFFIXES = (".cc", ".h", ".proto", ".textproto", ".py", ".sh", ".md", ".txt", ".yml",
                 ".yaml", ".cfg", ".conf", ".cmake", ".json", ".ts", ".js")
TEXT_NAMES = ("CMakeLists.txt", "Dockerfile", "run")
SKIP_DIRS = (".git", "node_modules", "__pycache__")
# Generated data: labels and numbers, not prose that points anywhere.
SKIP_SUFFIXES_FOR_REFS = (".csv", ".svg", ".json")

PATH_RE = re.compile(r"(?<![\w/.$-])((?:%s)/[\w.*/-]*[\w*])" %
                     "|".join(re.escape(d) for d in TOP_DIRS))
TOP_DOC_RE = re.compile(r"(?<![\w/.-])([A-Z][A-Z_]+\.md)\b")
LINK_RE = re.compile(r"\[[^\]\n]*\]\(([^)\s]+)\)")
HEADING_REF_RE = re.compile(
    r"(?<![\w/.-])((?:docs/[\w-]+\.md)|README(?:\.md)?|ARCHITECTURE(?:\.md)?|"
    r"PERFORMANCE(?:\.md)?)(?:'s)?,? (?:section )?[\"\u201c]([^\"\u201d\n]+)")
SECTION_RE = re.compile(r"docs/algorithms\.md,? §\s*(\d+(?:\.\d+)?)(?:\s*[-\u2013]\s*(\d+(?:\.\d+)?))?")
TRACKER_RE = re.compile(r"\b[Ii]ssues? #?\d+\b|\(#\d+\)|\bissue-\d+\b")
HEADING_RE = re.compile(r"^(#{1,6})\s+(.*?)\s*#*\s*$")
# A bold lead-in names a section too: "**When the disk fills up** (or ...": "- **Title.** text".
LEAD_IN_RE = re.compile(r"^\s*(?:[-*] )?\*\*([^*]+)\*\*")
SECTION_HEADING_RE = re.compile(r"^#{2,3} (\d+(?:\.\d+)?)[. ]")


def is_build_dir(name):
    return name == "build" or name.startswith("build-") or name.startswith("build_")


def project_files(root):
    for dirpath, dirnames, filenames in os.walk(root):
        rel_dir = os.path.relpath(dirpath, root)
        dirnames[:] = sorted(d for d in dirnames
                             if d not in SKIP_DIRS and not (rel_dir == "." and is_build_dir(d)))
        for name in sorted(filenames):
            if name.endswith(TEXT_SUFFIXES) or name in TEXT_NAMES or name.endswith(
                    SKIP_SUFFIXES_FOR_REFS):
                path = os.path.join(dirpath, name)
                yield os.path.relpath(path, root)


def read_lines(path):
    try:
        with open(path, encoding="utf-8") as f:
            return f.read().split("\n")
    except (UnicodeDecodeError, OSError):
        return None


def slug(heading):
    """GitHub's anchor for a heading: lowercase, punctuation dropped, spaces to hyphens."""
    text = re.sub(r"`|\*\*|\*|_(?=\w)", "", heading.strip().lower())
    text = re.sub(r"[^\w\- ]", "", text)
    return text.replace(" ", "-")


class Docs:
    """Headings of the markdown documents, read once."""

    def __init__(self, root):
        self.root = root
        self.cache = {}

    def headings(self, rel):
        if rel not in self.cache:
            lines = read_lines(os.path.join(self.root, rel)) or []
            titles, in_fence = [], False
            for line in lines:
                if line.lstrip().startswith("```"):
                    in_fence = not in_fence
                    continue
                m = HEADING_RE.match(line) or LEAD_IN_RE.match(line)
                if m and not in_fence:
                    titles.append(m.group(m.lastindex))
            self.cache[rel] = titles
        return self.cache[rel]

    def anchors(self, rel):
        seen, out = {}, set()
        for title in self.headings(rel):
            s = slug(title)
            n = seen.get(s, 0)
            out.add(s if n == 0 else "%s-%d" % (s, n))
            seen[s] = n + 1
        return out

    def sections(self, rel):
        out = set()
        for line in read_lines(os.path.join(self.root, rel)) or []:
            m = SECTION_HEADING_RE.match(line)
            if m:
                out.add(m.group(1))
        return out


# The checker and its test name missing things on purpose.
SELF = ("check_refs.py", "check_refs_test.py")
# Placeholders in example paths (sim/presets/NAME.textproto) and what a build produces.
PLACEHOLDERS = ("NAME", "FILE", "DIR", "PRESET", "MODEL")
GENERATED_SUFFIXES = (".pb.h", ".pb.cc", "_pb2.py", "_pb2_grpc.py")


def names_a_source(path):
    """False for placeholders, generated files and built programs (graphbandit-*)."""
    parts = path.split("/")
    if any(p.split(".")[0] in PLACEHOLDERS for p in parts):
        return False
    return not (path.endswith(GENERATED_SUFFIXES) or parts[-1].startswith("graphbandit-"))


def doc_path(name):
    if name in ("README", "ARCHITECTURE", "PERFORMANCE"):
        return name + ".md"
    return name


def check_file(root, rel, docs, findings):
    lines = read_lines(os.path.join(root, rel))
    if lines is None:
        return
    base = os.path.basename(rel)
    if rel.endswith((".cc", ".h", ".py")) and len(lines) - 1 > MAX_SOURCE_LINES:
        findings.append("%s: size: %d lines (at most %d)" % (rel, len(lines) - 1, MAX_SOURCE_LINES))
    if rel == "README.md" and len(lines) - 1 > MAX_README_LINES:
        findings.append("%s: size: %d lines (at most %d)" % (rel, len(lines) - 1, MAX_README_LINES))
    if rel.endswith(SKIP_SUFFIXES_FOR_REFS):
        # Generated data carries labels only; they still may not name tracker numbers.
        for i, line in enumerate(lines, 1):
            if TRACKER_RE.search(line):
                findings.append("%s:%d: tracker: %s" % (rel, i, TRACKER_RE.search(line).group(0)))
        return
    is_md = rel.endswith(".md")
    in_fence = False
    for i, line in enumerate(lines, 1):
        where = "%s:%d" % (rel, i)
        if is_md and line.lstrip().startswith("```"):
            in_fence = not in_fence
        m = TRACKER_RE.search(line)
        if m and base not in SELF:
            findings.append("%s: tracker: %s" % (where, m.group(0)))
        for m in PATH_RE.finditer(line if base not in SELF else ""):
            path = m.group(1).rstrip(".")
            if line[m.end():m.end() + 2].lstrip(".")[:1] in ("{", "<", "$") or not names_a_source(path):
                continue
            here = os.path.dirname(rel)
            candidates = [os.path.join(root, path), os.path.join(root, here, path)]
            if not any(glob.glob(c) if "*" in path else os.path.exists(c) for c in candidates):
                findings.append("%s: path: %s does not exist" % (where, path))
        for m in TOP_DOC_RE.finditer(line if base not in SELF else ""):
            if not os.path.exists(os.path.join(root, m.group(1))):
                findings.append("%s: path: %s does not exist" % (where, m.group(1)))
        if is_md and not in_fence:
            for m in LINK_RE.finditer(line):
                target = m.group(1)
                if re.match(r"^[a-z]+:", target):
                    continue
                file_part, _, anchor = target.partition("#")
                target_rel = (os.path.normpath(os.path.join(os.path.dirname(rel), file_part))
                              if file_part else rel)
                if not os.path.exists(os.path.join(root, target_rel)):
                    findings.append("%s: link: %s does not exist" % (where, target))
                elif anchor and target_rel.endswith(".md") and anchor not in docs.anchors(
                        target_rel):
                    findings.append("%s: link: no heading #%s in %s" % (where, anchor, target_rel))
        for m in HEADING_REF_RE.finditer(line):
            target_rel = doc_path(m.group(1))
            quoted = m.group(2).strip().rstrip(",.;:")
            if not os.path.exists(os.path.join(root, target_rel)):
                continue  # reported as a path
            titles = [t.lower() for t in docs.headings(target_rel)]
            if not any(t.startswith(quoted.lower()) for t in titles):
                findings.append('%s: heading: %s has no section "%s"' % (where, target_rel, quoted))
        for m in SECTION_RE.finditer(line):
            have = docs.sections("docs/algorithms.md")
            for number in filter(None, (m.group(1), m.group(2))):
                if number not in have:
                    findings.append("%s: section: docs/algorithms.md has no §%s" % (where, number))


def main(argv):
    root = os.path.abspath(argv[1] if len(argv) > 1 else
                           os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
    docs = Docs(root)
    findings = []
    count = 0
    for rel in project_files(root):
        count += 1
        check_file(root, rel, docs, findings)
    for f in findings:
        print(f)
    print("check_refs: %d files, %d findings" % (count, len(findings)))
    return 1 if findings else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
