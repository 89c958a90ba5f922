"""Ray's ``pip`` against its ``uv`` runtime_env field: seconds until a task using them runs.

``peach deploy`` gives each component deployment its py_env's requirements in its
``runtime_env``; Ray can install them with pip (``"pip": [...]``) or with uv
(``"uv": [...]``). On one fresh local Ray head (started here on free loopback ports,
stopped at the end), a task that imports the packages is run with each field in turn,
``--runs`` times each, alternating, every run with a set Ray has not installed yet (so
each one builds its env cold). Prints the median of each and the ratio pip / uv.

Usage::

    python benchmarks/ray_runtime_env.py            # 2 runs each
    python benchmarks/ray_runtime_env.py --runs 3 --json
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))

from ray_cluster import RayHead  # noqa: E402

PACKAGES = ["pyjokes", "tomli-w"]
VARIANTS = ["1.16.0", "1.15.0", "1.14.0", "1.13.0", "1.12.0", "1.11.0", "1.10.0", "1.9.0"]
"""six versions: one more pinned requirement that makes every run's set new to Ray."""


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--runs", type=int, default=2, help=f"at most {len(VARIANTS) // 2}")
    parser.add_argument("--json", action="store_true")
    options = parser.parse_args()
    import ray

    times: dict[str, list[float]] = {"pip": [], "uv": []}
    with RayHead(num_cpus=2) as head:
        ray.init(address=f"127.0.0.1:{head.gcs_port}", logging_level="ERROR")

        @ray.remote(num_cpus=0.1)
        def probe() -> str:
            import pyjokes  # noqa: F401
            import tomli_w  # noqa: F401

            return sys.prefix

        @ray.remote(num_cpus=0.1)
        def warm_up() -> str:
            return sys.prefix

        ray.get(warm_up.remote(), timeout=120)  # a worker started before timing anything
        variants = iter(VARIANTS)
        for _ in range(options.runs):
            for field in ("pip", "uv"):
                packages = [*PACKAGES, f"six=={next(variants)}"]
                started = time.perf_counter()
                ray.get(probe.options(runtime_env={field: packages}).remote(), timeout=600)
                times[field].append(time.perf_counter() - started)
        ray.shutdown()
    pip, uv = statistics.median(times["pip"]), statistics.median(times["uv"])
    result = {
        "runs": options.runs,
        "pip_s": times["pip"],
        "uv_s": times["uv"],
        "pip_median_s": round(pip, 2),
        "uv_median_s": round(uv, 2),
        "ratio_pip_over_uv": round(pip / uv, 2),
    }
    if options.json:
        print(json.dumps(result, indent=2))
    else:
        print(
            f"pip runtime_env: median {pip:.2f} s ({', '.join(f'{t:.2f}' for t in times['pip'])})"
        )
        print(f"uv runtime_env:  median {uv:.2f} s ({', '.join(f'{t:.2f}' for t in times['uv'])})")
        print(f"ratio pip / uv: {pip / uv:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
