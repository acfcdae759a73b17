#!/usr/bin/env python3
"""Puts one bench run's printed tables into docs/performance.md, in place of that bench's block.

    scripts/bench-docs.py NAME LOG [COMMAND]      (LOG "-": read standard input)

The block is the text between `<!-- bench:NAME:begin -->` and `<!-- bench:NAME:end -->`. It becomes
the run's commit, machine and date, the command that reruns it, and the output as printed. The bench
scripts call this with `--write-docs`; the figures a block held before live in git's history.
"""
import os
import platform
import subprocess
import sys
from datetime import datetime, timezone

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PAGE = os.path.join(ROOT, "docs", "performance.md")


def machine():
    model = ""
    try:
        with open("/proc/cpuinfo") as f:
            model = next((l.split(":", 1)[1].strip() for l in f if l.startswith("model name")), "")
    except OSError:
        pass
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    return f"{os.cpu_count()} cores{', ' + model if model else ''}, {platform.system()} {platform.release()}, load average {load:.1f} at the end"


def main():
    if len(sys.argv) not in (3, 4):
        sys.exit(__doc__)
    name, log = sys.argv[1], sys.argv[2]
    command = sys.argv[3] if len(sys.argv) == 4 else name
    output = sys.stdin.read() if log == "-" else open(log).read()
    if log == "-":
        sys.stdout.write(output)
    commit = subprocess.run(["git", "-C", ROOT, "describe", "--always", "--dirty"],
                            capture_output=True, text=True).stdout.strip() or "unknown"
    begin, end = f"<!-- bench:{name}:begin -->", f"<!-- bench:{name}:end -->"
    text = open(PAGE).read()
    if text.count(begin) != 1 or text.count(end) != 1 or text.index(begin) > text.index(end):
        sys.exit(f"bench-docs: {PAGE} has no single {begin} ... {end} block")
    date = datetime.now(timezone.utc).strftime("%Y-%m-%d")
    block = (f"{begin}\nCommit `{commit}`, {date}; {machine()}. Rerun: `{command}`.\n\n"
             f"```text\n{output.rstrip()}\n```\n{end}")
    head, rest = text.split(begin, 1)
    tail = rest.split(end, 1)[1]
    with open(PAGE, "w") as f:
        f.write(head + block + tail)
    print(f"bench-docs: wrote the {name} block of docs/performance.md", file=sys.stderr)


if __name__ == "__main__":
    main()
