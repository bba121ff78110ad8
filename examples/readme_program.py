#!/usr/bin/env python3
"""Writes the README's complete program to OUT, so that the build compiles it as written; or
checks that a document's program is an example's source, word for word.

    readme_program.py README.md OUT.cpp
    readme_program.py --same docs/TORCH.md examples/torch_resume.cpp

The program is the first ```cpp block after the line that says it is built by the tests.
Fails, naming the document, when there is no such block or (--same) when it differs.
"""
import sys
from pathlib import Path

MARKER = "<!-- the program below is built and run by the tests"


def program_of(readme):
    lines = readme.read_text(encoding="utf-8").splitlines()
    try:
        start = next(i for i, line in enumerate(lines) if line.startswith(MARKER))
        fence = next(i for i in range(start + 1, len(lines)) if lines[i].strip() == "```cpp")
        end = next(i for i in range(fence + 1, len(lines)) if lines[i].strip() == "```")
    except StopIteration:
        sys.exit(f"{readme}: no ```cpp block after the line {MARKER!r}")
    return "\n".join(lines[fence + 1:end]) + "\n"


def main():
    if sys.argv[1] == "--same":
        doc, source = Path(sys.argv[2]), Path(sys.argv[3])
        if program_of(doc) != source.read_text(encoding="utf-8"):
            sys.exit(f"{doc}: its program is not {source} as it is; copy the file into it")
        return
    readme, out = Path(sys.argv[1]), Path(sys.argv[2])
    program = program_of(readme)
    # Rewritten only when it changed, so that the build does not redo its work for nothing.
    if not out.exists() or out.read_text(encoding="utf-8") != program:
        out.write_text(program, encoding="utf-8")


if __name__ == "__main__":
    main()
