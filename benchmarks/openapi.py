"""What `peach openapi` costs on a large project, against `peach validate` of the same project.

- ``peach openapi`` on the generated project of 300 endpoints (10 notebooks of 30 functions,
  ``benchmarks/cli_startup.py``'s), from process start to exit. Target: under 1 s.
- Baselines of the same run: ``peach validate`` on that project (which reads the same
  notebooks; the document is built on top of what it reads) and ``peach --version`` (the
  interpreter and the CLI's start).

Usage::

    python benchmarks/openapi.py              # 7 runs each, after one warm-up
    python benchmarks/openapi.py --runs 11 --json
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from cli_startup import ENDPOINTS, generate_project, peach_command, time_command  # noqa: E402

TARGET_S = 1.0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=7)
    parser.add_argument("--json", action="store_true", help="print the figures as JSON")
    options = parser.parse_args()
    peach = peach_command()
    with tempfile.TemporaryDirectory() as folder:
        big = generate_project(Path(folder) / "big")
        commands = {
            "peach --version": [*peach, "--version"],
            f"peach validate {ENDPOINTS} endpoints": [*peach, "validate", str(big)],
            f"peach openapi {ENDPOINTS} endpoints": [*peach, "openapi", str(big)],
        }
        medians: dict[str, float] = {}
        for name, command in commands.items():
            times, code, error = time_command(command, options.runs)
            if code:
                raise SystemExit(f"{name} exited with {code}: {error}")
            medians[name] = statistics.median(times)
    openapi = medians[f"peach openapi {ENDPOINTS} endpoints"]
    validate = medians[f"peach validate {ENDPOINTS} endpoints"]
    version = medians["peach --version"]
    figures = {
        "runs": options.runs,
        "median_s": medians,
        "openapi_over_validate": openapi / validate,
        "openapi_over_version": openapi / version,
        "target_s": TARGET_S,
        "met": openapi < TARGET_S,
    }
    if options.json:
        sys.stdout.write(json.dumps(figures, indent=2) + "\n")
    else:
        for name, median in medians.items():
            sys.stdout.write(f"{name:32} {median:7.3f} s median\n")
        sys.stdout.write(
            f"openapi / validate: {figures['openapi_over_validate']:.2f}x · "
            f"openapi / --version: {figures['openapi_over_version']:.2f}x · "
            f"target < {TARGET_S:g} s: {'met' if figures['met'] else 'NOT met'}\n"
        )
    return 0 if figures["met"] else 1


if __name__ == "__main__":
    raise SystemExit(main())
