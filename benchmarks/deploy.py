"""How long `peach deploy` takes to a healthy application, against Ray's own tools.

On one fresh local Ray head (started here on free loopback ports, stopped at the end):

- **deploy to healthy**: ``peach deploy PROJECT`` (validate, zip, upload, PUT, wait until
  every replica runs) against ``serve deploy`` of the very config ``peach deploy --dry-run``
  prints, followed by polling ``serve status`` until the application is RUNNING — the
  closest a user gets with Ray's CLI. The two alternate, ``--runs`` times each, the
  application deleted between runs; the median of each and the ratio are reported
  (target: peach ≤ 1.2 × serve deploy + polling).
- **redeploy unchanged**: ``peach deploy`` of the same project again (nothing restarts).
- **a failing init**: seconds from ``peach deploy`` of ``tests/projects/deploy_initfail``
  to its exit 1 with the user's error, and from the first STARTING replica to that exit
  (target ≤ 5 s), against the time Serve takes to report DEPLOY_FAILED.
- **request latency**: ``--requests`` sequential GETs of ``/hello`` through the Ray Serve
  proxy and through ``peach dev`` serving the same project: median and p95; and, on the
  same cluster at the same time, a bare two-deployment Serve app (``bare_serve_app.py``: an
  ingress calling a model deployment by handle, with as many model replicas as the
  component behind ``/hello`` has, so that Serve's router picks a replica per call in both)
  under ``/bare``, the two measured in alternating blocks (target: peach ≤ 1.1 × bare, median).

Every figure is measured twice: on a single-node head, and on two nodes — a head offering
no CPUs and a worker node, both on loopback — where every replica runs on the worker.

Usage::

    python benchmarks/deploy.py                   # 3 runs each, tests/projects/deploy_basic
    python benchmarks/deploy.py --runs 5 --json
    python benchmarks/deploy.py --nodes 2         # the two-node cluster only
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx
import yaml

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))

from ray_cluster import RayHead, free_port  # noqa: E402

BASIC = ROOT / "tests" / "projects" / "deploy_basic"
INITFAIL = ROOT / "tests" / "projects" / "deploy_initfail"
ENV = dict(os.environ, NO_COLOR="1", COLUMNS="200")


def peach(*args: str, timeout: float = 600) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "peach_cli.cli", *args],
        capture_output=True,
        text=True,
        env=ENV,
        timeout=timeout,
        cwd=ROOT,
    )


def serve_cli(*args: str) -> subprocess.CompletedProcess[str]:
    serve = str(Path(sys.executable).parent / "serve")
    return subprocess.run(
        [serve, *args], capture_output=True, text=True, env=ENV, timeout=600, cwd=ROOT
    )


def clear_applications(dashboard: str) -> None:
    httpx.put(f"{dashboard}/api/serve/applications/", json={"applications": []}, timeout=30)
    deadline = time.monotonic() + 120
    while httpx.get(f"{dashboard}/api/serve/applications/", timeout=30).json()["applications"]:
        if time.monotonic() > deadline:
            raise RuntimeError("applications did not go away")
        time.sleep(0.2)


def time_peach_deploy(project: Path, head: RayHead) -> float:
    began = time.perf_counter()
    result = peach(
        "deploy", str(project), "--address", head.dashboard_url,
        "--http-port", str(head.http_port),
    )  # fmt: skip
    elapsed = time.perf_counter() - began
    if result.returncode != 0:
        raise RuntimeError(f"peach deploy failed:\n{result.stderr}")
    return elapsed


def time_serve_deploy(config_path: Path, app: str, head: RayHead) -> float:
    began = time.perf_counter()
    result = serve_cli("deploy", str(config_path), "--address", head.dashboard_url)
    if result.returncode != 0:
        raise RuntimeError(f"serve deploy failed:\n{result.stderr}")
    deadline = time.monotonic() + 600
    while True:
        status = serve_cli("status", "--address", head.dashboard_url)
        apps = (yaml.safe_load(status.stdout) or {}).get("applications") or {}
        state = (apps.get(app) or {}).get("status")
        if state == "RUNNING":
            return time.perf_counter() - began
        if state == "DEPLOY_FAILED" or time.monotonic() > deadline:
            raise RuntimeError(f"serve deploy did not become RUNNING: {status.stdout}")


def measure_deploys(project: Path, head: RayHead, runs: int) -> dict:
    dry = peach("deploy", str(project), "--dry-run", "--format", "yaml", "--http-port",
                str(head.http_port))  # fmt: skip
    if dry.returncode != 0:
        raise RuntimeError(dry.stderr)
    config = yaml.safe_load(dry.stdout)
    app = config["applications"][0]["name"]
    config_path = Path(tempfile.mkdtemp()) / "serve-config.yaml"
    config_path.write_text(dry.stdout)
    # one warm-up deploy: Serve's controller and proxy start, the packages get uploaded
    time_peach_deploy(project, head)
    clear_applications(head.dashboard_url)
    peach_times, serve_times = [], []
    for run in range(runs):
        order = ("peach", "serve") if run % 2 == 0 else ("serve", "peach")
        for tool in order:
            if tool == "peach":
                peach_times.append(time_peach_deploy(project, head))
            else:
                serve_times.append(time_serve_deploy(config_path, app, head))
            clear_applications(head.dashboard_url)
    peach_median, serve_median = statistics.median(peach_times), statistics.median(serve_times)
    time_peach_deploy(project, head)
    unchanged = statistics.median(time_peach_deploy(project, head) for _ in range(runs))
    clear_applications(head.dashboard_url)
    return {
        "peach_redeploy_unchanged_s": unchanged,
        "peach_deploy_s": peach_times,
        "serve_deploy_and_poll_s": serve_times,
        "peach_median_s": peach_median,
        "serve_median_s": serve_median,
        "ratio": peach_median / serve_median,
        "target_ratio": 1.2,
    }


def measure_init_failure(head: RayHead) -> dict:
    """peach's exit on a failing init, against Serve's own DEPLOY_FAILED."""
    dashboard = head.dashboard_url
    first_starting: list[float] = []
    stop = False

    def watch() -> None:  # when does the first replica of broken.main start?
        while not stop:
            try:
                apps = httpx.get(f"{dashboard}/api/serve/applications/", timeout=10).json()
                deployment = apps["applications"]["deploy-initfail"]["deployments"]["broken.main"]
                if deployment["replicas"] and not first_starting:
                    first_starting.append(time.perf_counter())
                    return
            except (KeyError, TypeError, httpx.HTTPError, ValueError):
                pass
            time.sleep(0.05)

    import threading

    watcher = threading.Thread(target=watch, daemon=True)
    watcher.start()
    began = time.perf_counter()
    result = peach("deploy", str(INITFAIL), "--address", dashboard)
    failed_at = time.perf_counter()
    stop = True
    watcher.join(timeout=5)
    assert result.returncode == 1 and "no weights" in result.stderr, result.stderr
    # how long Serve itself takes to call it DEPLOY_FAILED (the app is still there)
    deadline = time.monotonic() + 180
    serve_failed = None
    while time.monotonic() < deadline:
        app = httpx.get(f"{dashboard}/api/serve/applications/", timeout=10).json()["applications"][
            "deploy-initfail"
        ]
        if app["status"] == "DEPLOY_FAILED":
            serve_failed = time.perf_counter() - began
            break
        time.sleep(0.1)
    clear_applications(dashboard)
    return {
        "peach_exit_s": failed_at - began,
        "peach_after_first_replica_s": failed_at - first_starting[0] if first_starting else None,
        "serve_deploy_failed_s": serve_failed,
        "target_after_replica_start_s": 5.0,
    }


def latencies(url: str, count: int) -> dict:
    times = []
    with httpx.Client(timeout=30) as client:
        for _ in range(10):  # warm-up
            client.get(url).raise_for_status()
        for _ in range(count):
            began = time.perf_counter()
            client.get(url).raise_for_status()
            times.append((time.perf_counter() - began) * 1000)
    times.sort()
    return {
        "median_ms": statistics.median(times),
        "p95_ms": times[int(len(times) * 0.95) - 1],
    }


def put_beside(head: RayHead, module: str, application: dict, attribute: str = "app") -> None:
    """PUT ``application`` (name, prefix, deployments) with ``benchmarks/<module>.py`` as
    its working_dir and ``<module>:<attribute>`` as its import path, beside the running
    applications."""
    from peach_cli.deploy.dashboard import DashboardClient
    from peach_cli.deploy.packaging import package

    source = (Path(__file__).parent / f"{module}.py").read_bytes()
    files = package(application["name"], [(f"{module}.py", source)])
    with DashboardClient(head.dashboard_url) as dashboard:
        if not dashboard.package_exists(files.name):
            dashboard.upload_package(files.name, files.data)
        details = dashboard.serve_details()
        others = [
            app["deployed_app_config"]
            for name, app in (details.get("applications") or {}).items()
            if name != application["name"] and app.get("deployed_app_config")
        ]
        application = {
            **application,
            "import_path": f"{module}:{attribute}",
            "runtime_env": {"working_dir": files.uri},
        }
        config = {
            "proxy_location": details.get("proxy_location") or "EveryNode",
            "http_options": {"host": "127.0.0.1", "port": head.http_port},
            "applications": [*others, application],
        }
        dashboard.put_applications(config)


def deploy_bare(head: RayHead, model_replicas: int = 1) -> str:
    """Deploy ``bare_serve_app.py`` under ``/bare`` beside the running applications, with
    ``model_replicas`` replicas of its model deployment (as many as the peach component
    it is compared with: with more than one, Serve's router picks a replica per call)."""
    from peach_cli.deploy.dashboard import DashboardClient
    from peach_cli.deploy.deployer import Reporter, wait_until_running

    deployments = [{"name": "Model", "num_replicas": model_replicas}]
    put_beside(
        head,
        "bare_serve_app",
        {"name": "bare", "route_prefix": "/bare", "deployments": deployments},
    )
    with DashboardClient(head.dashboard_url) as dashboard:
        wait_until_running(dashboard, "bare", timeout_s=300, reporter=Reporter())
    return f"{head.serve_url}/bare"


def alternating_latencies(urls: dict[str, str], count: int, block: int = 50) -> dict:
    """``count`` sequential GETs of each url, in alternating blocks (same load for both)."""
    times: dict[str, list[float]] = {name: [] for name in urls}
    with httpx.Client(timeout=30) as client:
        for url in urls.values():
            for _ in range(10):  # warm-up
                client.get(url).raise_for_status()
        while any(len(t) < count for t in times.values()):
            for name, url in urls.items():
                for _ in range(min(block, count - len(times[name]))):
                    began = time.perf_counter()
                    client.get(url).raise_for_status()
                    times[name].append((time.perf_counter() - began) * 1000)
    result = {}
    for name, values in times.items():
        values.sort()
        result[name] = {
            "median_ms": statistics.median(values),
            "p95_ms": values[int(len(values) * 0.95) - 1],
        }
    return result


def replicas_behind(project: Path, url: str) -> int:
    """How many replicas the component answering ``url`` has (the bare app gets as many)."""
    from peach_cli.checks.build import build_plan

    plan, _ = build_plan(project)
    assert plan is not None, f"{project} does not validate"
    for endpoint in plan.endpoints.values():
        if endpoint.url == url:
            return endpoint.components[endpoint.primary].replicas
    raise SystemExit(f"{project} has no endpoint at {url}")


def measure_latency(project: Path, head: RayHead, requests: int) -> dict:
    time_peach_deploy(project, head)
    model_replicas = replicas_behind(project, "/hello")
    bare_url = deploy_bare(head, model_replicas)
    measured = alternating_latencies(
        {"ray_proxy": f"{head.serve_url}/hello", "bare_serve": f"{bare_url}?name=world"},
        requests,
    )
    ray, bare = measured["ray_proxy"], measured["bare_serve"]
    bare["model_replicas"] = model_replicas
    clear_applications(head.dashboard_url)
    port = free_port()
    log = tempfile.NamedTemporaryFile(prefix="peach-dev-", suffix=".log", delete=False)
    dev = subprocess.Popen(
        [sys.executable, "-m", "peach_cli.cli", "dev", str(project), "--port", str(port),
         "--no-reload"],
        stdout=log, stderr=subprocess.STDOUT, env=ENV, cwd=ROOT, start_new_session=True,
    )  # fmt: skip
    try:
        url = f"http://127.0.0.1:{port}/hello"
        deadline = time.monotonic() + 60
        while True:
            try:
                if httpx.get(url, timeout=5).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            if time.monotonic() > deadline or dev.poll() is not None:
                raise RuntimeError(f"peach dev did not answer: {Path(log.name).read_text()}")
            time.sleep(0.1)
        local = latencies(url, requests)
    finally:
        try:
            os.killpg(dev.pid, signal.SIGINT)
            dev.wait(timeout=15)
        except (subprocess.TimeoutExpired, ProcessLookupError):
            os.killpg(dev.pid, signal.SIGKILL)
            dev.wait()
    return {
        "ray_proxy": ray,
        "bare_serve": bare,
        "ratio_to_bare": ray["median_ms"] / bare["median_ms"],
        "target_ratio_to_bare": 1.1,
        "peach_dev": local,
    }


def measure_cluster(head: RayHead, args: argparse.Namespace) -> dict:
    return {
        "deploy": measure_deploys(args.project, head, args.runs),
        "init_failure": measure_init_failure(head),
        "latency": measure_latency(args.project, head, args.requests),
    }


def print_results(label: str, results: dict, runs: int) -> None:
    deploy, failure, latency = results["deploy"], results["init_failure"], results["latency"]
    print(f"-- {label}")
    print(
        f"deploy to healthy   peach deploy {deploy['peach_median_s']:6.2f} s   "
        f"serve deploy + polling {deploy['serve_median_s']:6.2f} s   "
        f"ratio {deploy['ratio']:.2f} (target ≤ {deploy['target_ratio']})"
    )
    print(
        f"redeploy unchanged  peach deploy {deploy['peach_redeploy_unchanged_s']:6.2f} s   "
        "(every replica kept)"
    )
    after = failure["peach_after_first_replica_s"]
    serve_failed = failure["serve_deploy_failed_s"]
    line = f"failing init        peach exits 1 after {failure['peach_exit_s']:.2f} s"
    if after is not None:
        line += f" ({after:.2f} s after the first replica started; target ≤ 5 s)"
    line += "   Serve DEPLOY_FAILED after "
    line += f"{serve_failed:.2f} s" if serve_failed else "more than 180 s"
    print(line)
    for name, label_text in (
        ("ray_proxy", "Ray Serve proxy"),
        (
            "bare_serve",
            f"bare Serve app ({latency['bare_serve']['model_replicas']} model replicas)",
        ),
        ("peach_dev", "peach dev"),
    ):
        item = latency[name]
        print(
            f"GET /hello          {label_text:33} median {item['median_ms']:6.2f} ms   "
            f"p95 {item['p95_ms']:6.2f} ms"
        )
    print(
        f"                    peach / bare (median) {latency['ratio_to_bare']:.2f} "
        f"(target ≤ {latency['target_ratio_to_bare']})"
    )


def misses(label: str, results: dict) -> list[str]:
    """The targets one cluster's figures missed (an unmeasured figure is a miss)."""
    deploy, failure, latency = results["deploy"], results["init_failure"], results["latency"]
    missed = []
    if deploy["ratio"] > deploy["target_ratio"]:
        missed.append(f"{label}: deploy ratio {deploy['ratio']:.2f} > {deploy['target_ratio']}")
    after, target = failure["peach_after_first_replica_s"], failure["target_after_replica_start_s"]
    if after is None or after > target:
        seen = "never seen starting" if after is None else f"{after:.2f} s"
        missed.append(f"{label}: failing init exit after the first replica {seen} > {target} s")
    ratio, target = latency["ratio_to_bare"], latency["target_ratio_to_bare"]
    if ratio > target:
        missed.append(f"{label}: latency peach / bare {ratio:.2f} > {target}")
    return missed


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--project", type=Path, default=BASIC)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--requests", type=int, default=300)
    parser.add_argument(
        "--nodes", choices=("1", "2", "both"), default="both", help="which cluster(s) to measure"
    )
    parser.add_argument("--json", action="store_true", help="print the results as JSON")
    args = parser.parse_args()
    results: dict = {"project": str(args.project.relative_to(ROOT))}
    if args.nodes in ("1", "both"):
        with RayHead(num_cpus=8) as head:
            results["one_node"] = measure_cluster(head, args)
    if args.nodes in ("2", "both"):
        # a head offering no CPUs: every replica runs on the worker node
        with RayHead(num_cpus=0, worker_cpus=8) as cluster:
            cluster.start_serve()
            results["two_nodes"] = measure_cluster(cluster, args)
    missed = [
        miss
        for key in ("one_node", "two_nodes")
        if key in results
        for miss in misses(key.replace("_", " "), results[key])
    ]
    results["targets_missed"] = missed
    if args.json:
        print(json.dumps(results, indent=2))
        return 0 if not missed else 1
    print(f"project: {results['project']}  ({args.runs} runs each, alternating)")
    if "one_node" in results:
        print_results("one node (a head with 8 CPUs)", results["one_node"], args.runs)
    if "two_nodes" in results:
        print_results(
            "two nodes (a head with no CPUs, a worker with 8)", results["two_nodes"], args.runs
        )
    print("targets met" if not missed else "TARGETS MISSED: " + "; ".join(missed))
    return 0 if not missed else 1


if __name__ == "__main__":
    sys.exit(main())
