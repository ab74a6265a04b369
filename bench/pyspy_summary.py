"""Summarise a py-spy raw profile per thread (user thread, jssync I/O thread, worker pool).

    py-spy record -r 400 --threads --idle -f raw -o prof.txt -- \
        python bench/run.py --only js_publish_sync --side jssync --runs 1
    python bench/pyspy_summary.py prof.txt 10
"""

from __future__ import annotations

import collections
import re
import sys


def main(argv: list[str]) -> int:
    path = argv[0]
    top = int(argv[1]) if len(argv) > 1 else 12
    by: dict[str, collections.Counter[str]] = collections.defaultdict(collections.Counter)
    tot: collections.Counter[str] = collections.Counter()
    with open(path) as f:
        for line in f:
            stack, _, count = line.rstrip().rpartition(" ")
            n = int(count)
            frames = stack.split(";")
            th = frames[0]
            name = "io" if "jssync-io" in th else "main" if "MainThread" in th else "pool" if "-cb-" in th else th[:30]
            tot[name] += n
            by[name][re.sub(r"\s*\(([^)]*)\)", r" [\1]", frames[-1])[:95]] += n
    for name in tot:
        print(f"== {name}: {tot[name]} samples (leaf frames; --idle counts waiting)")
        for k, v in by[name].most_common(top):
            print(f"  {v / tot[name]:6.1%} {k}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
