"""What a command pays to start, as shares of the fixed part of an apply, measured in turns.

The fixed part is bench/rewrite.py's: the client CPU of `tsmigrate apply` rewriting a small
table (APPLY_SMALL_ROWS rows: imports, prepare, plan, history, thread start-ups), each run on a
server of its own. Taking turns with it, each a fresh process with compiled modules (as from an
install) and ``OPENBLAS_NUM_THREADS=1`` (what the CLI sets): the interpreter alone, importing the
SDK, and importing the SDK with the modules of tsmigrate an apply runs. Their absolute CPU times
move with the machine and its load; the shares are what this bench states. The last line:

interpreter_share=I sdk_share=S sdk_and_tsmigrate_share=T (medians over turns; fixed_s_min=A fixed_s_max=B)

    python bench/startup.py [--turns 7]
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import subprocess
import sys
import tempfile

from rewrite import APPLY_SMALL_ROWS, apply_on_own_server, compiled_modules
from serve import SAFE_PATH, use_bench_credentials

TSMIGRATE_APPLY = ("tsmigrate.cli", "tsmigrate.commands.apply", "tsmigrate.instance.apply",
                   "tsmigrate.rewrite.driver")
IMPORTS = {
    "interpreter": "pass",
    "sdk": "import tablestore",
    "sdk_and_tsmigrate": "import tablestore, " + ", ".join(TSMIGRATE_APPLY),
}


def child_cpu_s(cmd: list[str]) -> float:
    """The client CPU (user + system) of running ``cmd`` to its end."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    subprocess.run(cmd, check=True, capture_output=True)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--turns", type=int, default=7)
    args = parser.parse_args()
    use_bench_credentials()
    os.environ.update(SAFE_PATH)
    os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
    with tempfile.TemporaryDirectory(prefix="bench-startup-pycache-") as cache:
        compiled_modules(cache)
        apply_on_own_server(APPLY_SMALL_ROWS, 2)  # the warm-up: what it imports is compiled
        fixed: list[float] = []
        shares: dict[str, list[float]] = {name: [] for name in IMPORTS}
        for _ in range(args.turns):
            cpu = {name: child_cpu_s([sys.executable, "-c", code]) for name, code in IMPORTS.items()}
            fixed_s = apply_on_own_server(APPLY_SMALL_ROWS, 2)["apply"][1]
            fixed.append(fixed_s)
            for name, seconds in cpu.items():
                shares[name].append(seconds / fixed_s)
            print("turn: apply fixed part " + f"{fixed_s:.3f} s, " + ", ".join(
                f"{name} {seconds:.3f} s" for name, seconds in cpu.items()), flush=True)
    print(" ".join(f"{name}_share={statistics.median(values):.2f}" for name, values in shares.items())
          + f" (medians over turns; fixed_s_min={min(fixed):.2f} fixed_s_max={max(fixed):.2f})")


if __name__ == "__main__":
    main()
