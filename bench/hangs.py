"""The seeded hangs (tests/data/scripts/hangs) under tfcc's supervision: how many the console names right, and the
seconds from the hang to its verdict (issue 40).

Each kind is a user's script (MultiWorkerMirrored or parameter-server) on local tasks, one of which hangs after a few
steps (a generator on an Event, a sleep in a custom loop, a py_function on a lock, a socket, the chief alone in a
plain evaluate, two threads deadlocked, SIGSTOP, a parameter-server worker that ends, a FIFO, a module of the
workdir). Named right: the console's stall names the stuck task(s) and the user's file:line (or the stopped state,
the pipe), groups every other task apart, and keeps every task's stack (tests.helpers.hangs.Seen.wrong). The
seconds: from the last step the console got to the 'where' it said. Goal: at least 9 of 10 named right, each within
60 s.

    python bench/hangs.py [--only KIND ...]
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from tests.helpers import hangs  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", nargs="*", help="these kinds only")
    args = parser.parse_args()
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    os.environ.setdefault("TF_NUM_INTRAOP_THREADS", "1")
    rows = []
    with tempfile.TemporaryDirectory() as home:
        os.environ["TFCC_HOME"] = str(Path(home) / "host-home")
        os.environ["TFCC_CONSOLE_HOME"] = str(Path(home) / "console-home")
        for table in hangs.kinds():
            if args.only and table["name"] not in args.only:
                continue
            seen = hangs.run_seeded(table, Path(home), f"bench-{table['name'].replace('_', '-')}")
            wrong = seen.wrong(table)
            where = next((w for _, k, w in seen.said if k == "where"), "")
            rows.append((table["name"], not wrong, seen.seconds, wrong or where))
            print(f"{table['name']}: {'named right' if not wrong else 'WRONG'} "
                  f"{'' if seen.seconds is None else f'{seen.seconds:.0f} s'}", file=sys.stderr, flush=True)
    print(f"{'kind':<16} {'named':>6} {'seconds':>8}")
    for name, right, seconds, _ in rows:
        print(f"{name:<16} {'yes' if right else 'NO':>6} {'-' if seconds is None else f'{seconds:.0f}':>8}")
    print("what the console said of each (its 'where'), or why it is not right:")
    for name, _, _, words in rows:
        print(f"  {name}: {words}")
    named = sum(right for _, right, _, _ in rows)
    slowest = max((s for _, right, s, _ in rows if right and s is not None), default=float("nan"))
    met = named >= 0.9 * len(rows) and slowest <= 60
    print(f"named right {named}/{len(rows)}; the slowest verdict {slowest:.0f} s after its hang "
          f"(goal >= 9/10 within 60 s: {'met' if met else 'MISSED'})")


if __name__ == "__main__":
    main()
