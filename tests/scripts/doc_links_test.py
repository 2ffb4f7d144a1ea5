#!/usr/bin/env python3
"""Every relative link in the README and docs/ (Markdown `[text](path)` and `[text](path#part)`)
names a file or folder that exists. Links to web addresses are not followed.

    python3 doc_links_test.py [REPO_ROOT]

Exit 0 when every link resolves, 1 with each broken link printed (file: target).
"""
import os
import re
import sys

LINK = re.compile(r"\]\(([^)\s#]+)(?:#[^)\s]*)?\)")


def markdown_files(root):
    yield os.path.join(root, "README.md")
    for folder, _, names in os.walk(os.path.join(root, "docs")):
        for name in sorted(names):
            if name.endswith(".md"):
                yield os.path.join(folder, name)


def broken_links(root):
    broken = []
    for path in markdown_files(root):
        with open(path, encoding="utf-8") as f:
            text = f.read()
        for m in LINK.finditer(text):
            target = m.group(1)
            if re.match(r"^[a-z]+:", target):  # https:, mailto:
                continue
            if not os.path.exists(os.path.normpath(os.path.join(os.path.dirname(path), target))):
                broken.append((os.path.relpath(path, root), target))
    return broken


def main():
    root = sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(__file__), "..", "..")
    root = os.path.abspath(root)
    files = list(markdown_files(root))
    if not os.path.exists(files[0]) or len(files) < 2:
        print(f"doc_links_test: no README.md and docs/ under {root}")
        return 1
    broken = broken_links(root)
    for path, target in broken:
        print(f"{path}: broken link {target}")
    print(f"{len(files)} Markdown files, {len(broken)} broken links")
    return 1 if broken else 0


if __name__ == "__main__":
    sys.exit(main())
