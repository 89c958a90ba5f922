"""What `peach deploy` uploads against the project's size, for 1, 10 and 30 components.

For each N a project is generated: N endpoints of one component each (one notebook), a
helper module and a data file of ``--data-mib`` MiB of incompressible bytes. The upload is
read from the code path of ``peach deploy --dry-run`` (``deployer.dry_run_bundle``: the
packages a deploy sends to a cluster that has none of them), no cluster needed; the
baseline is the project's size in the same run (the files ``--dry-run`` lists).

Target (issue 28): upload bytes = the project's size + ≤ 64 KiB per component. peach's
runtime package (the tool's own replica code, the same for every project, sent once per
cluster and peach version) is shown apart, in ``runtime_bytes``, and is not counted per
component; ``per_component_extra`` is what the deploy sends beyond the project's files and
that runtime, divided by N (the gateway's routes and each component's spec package).

Usage::

    python benchmarks/upload_bytes.py               # N = 1, 10, 30, a 4 MiB data file
    python benchmarks/upload_bytes.py --json

``measure(n)`` returns one row, for ``benchmarks/scale.py``.
"""

from __future__ import annotations

import argparse
import json
import random
import shutil
import sys
import tempfile
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
NOTEBOOK = ROOT / "tests" / "projects" / "deploy_basic" / "notebooks" / "Hello.ipynb"
COUNTS = (1, 10, 30)
DATA_MIB = 4.0
EXTRA_PER_COMPONENT = 64 * 1024


def make_project(folder: Path, n: int, data_bytes: int) -> Path:
    """A project of ``n`` one-component endpoints over one notebook, a helper and a data file."""
    (folder / "notebooks").mkdir(parents=True)
    shutil.copy(NOTEBOOK, folder / "notebooks" / "Hello.ipynb")
    (folder / "helpers.py").write_text("SCALE = 2\n")
    (folder / "data").mkdir()
    (folder / "data" / "model.bin").write_bytes(random.Random(n).randbytes(data_bytes))
    lines = ["codops: upload-bench", "timeout_s: 5", "endpoints:"]
    for index in range(n):
        lines += [
            f"  e{index}:",
            f"    url: /e{index}",
            "    components:",
            "      main: {notebook: notebooks/Hello.ipynb, init: load, method: hello, cpus: 0.1}",
        ]
    (folder / "peach.yaml").write_text("\n".join(lines) + "\n")
    return folder


def measure(n: int, data_mib: float = DATA_MIB) -> dict[str, Any]:
    """One row: the project's size and what a first deploy of it would send, for ``n``
    components (``ok``: within the project's size + 64 KiB per component, runtime apart)."""
    from peach_cli.checks.build import build_plan
    from peach_cli.deploy.deployer import dry_run_bundle, upload_selection

    with tempfile.TemporaryDirectory(prefix="peach-upload-") as tmp:
        project = make_project(Path(tmp) / "project", n, int(data_mib * 1024 * 1024))
        plan, diagnostics = build_plan(project)
        if plan is None:
            raise SystemExit(f"the generated project is not valid: {diagnostics}")
        project_bytes = upload_selection(plan).total_bytes
        bundle = dry_run_bundle(plan)
    by_kind: dict[str, int] = {}
    for item in bundle.packages:
        by_kind[item.kind] = by_kind.get(item.kind, 0) + len(item.data)
    upload = bundle.upload_bytes
    runtime = by_kind.get("runtime", 0)
    extra = (upload - runtime - project_bytes) / n
    return {
        "n": n,
        "project_bytes": project_bytes,
        "upload_bytes": upload,
        "runtime_bytes": runtime,
        "per_component_extra": round(extra),
        "packages": len(bundle.packages),
        "project_packages": sum(1 for p in bundle.packages if p.kind == "project"),
        "ratio": upload / project_bytes,
        "ok": extra <= EXTRA_PER_COMPONENT,
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data-mib", type=float, default=DATA_MIB)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    rows = [measure(n, args.data_mib) for n in COUNTS]
    if args.json:
        print(json.dumps(rows, indent=1))
    else:
        print(
            f"{'N':>3}  {'project_bytes':>13}  {'upload_bytes':>12}  {'per_component_extra':>19}"
            f"  {'runtime_bytes':>13}  {'upload/project':>14}  packages  verdict"
        )
        for row in rows:
            print(
                f"{row['n']:>3}  {row['project_bytes']:>13}  {row['upload_bytes']:>12}  "
                f"{row['per_component_extra']:>19}  {row['runtime_bytes']:>13}  "
                f"{row['ratio']:>13.3f}x  {row['packages']:>8}  "
                f"{'PASS' if row['ok'] else 'FAIL'}"
            )
    missed = [
        f"N={r['n']}: {r['per_component_extra']} B per component > {EXTRA_PER_COMPONENT} B"
        for r in rows
        if not r["ok"]
    ]
    missed += [
        f"N={r['n']}: {r['project_packages']} project packages"
        for r in rows
        if r["project_packages"] != 1
    ]
    print("targets met" if not missed else "TARGETS MISSED: " + "; ".join(missed))
    return 1 if missed else 0


if __name__ == "__main__":
    sys.exit(main())
