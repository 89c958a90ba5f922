"""A real Ray cluster for tests: `ray start --head` on free loopback ports, and optionally
one worker node (`ray start --address=…`) on other free ports of the same machine.

Each node runs in its own session (``start_new_session``) and the head has its own
``--temp-dir``, so teardown can stop exactly their processes — the daemons and the workers
they spawned share their node's session id — and never another cluster on the machine.

Usage::

    with RayHead(num_cpus=32) as head:
        head.dashboard_url      # http://127.0.0.1:<port>

    # a head offering no CPUs plus a worker node: every replica runs on the worker
    with RayHead(num_cpus=0, worker_cpus=4) as cluster:
        cluster.start_serve()   # Serve's proxy on the head only (both nodes share 127.0.0.1)
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx

START_TIMEOUT_S = 90.0


def free_port() -> int:
    """A port free on 127.0.0.1 right now (bind to 0, read, release)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def free_ports(count: int) -> list[int]:
    ports: set[int] = set()
    while len(ports) < count:
        ports.add(free_port())
    return sorted(ports)


def _session_of(pid: int) -> int | None:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    # the command name is in parentheses and may contain spaces
    fields = stat.rsplit(")", 1)[1].split()  # state ppid pgrp session ...
    if fields[0] in ("Z", "X"):  # a zombie is already dead; its parent reaps it
        return None
    return int(fields[3])


def processes_in_session(session: int) -> list[int]:
    """Pids of every live process whose session id is ``session``."""
    pids = []
    for entry in os.listdir("/proc"):
        if entry.isdigit() and _session_of(int(entry)) == session:
            pids.append(int(entry))
    return pids


def _stop_session(session: int) -> None:
    _stop_sessions([session])


def _stop_sessions(sessions: list[int]) -> None:
    for sig, grace in ((signal.SIGTERM, 5.0), (signal.SIGKILL, 5.0)):
        pids = [pid for session in sessions for pid in processes_in_session(session)]
        if not pids:
            return
        for pid in pids:
            try:
                os.kill(pid, sig)
            except ProcessLookupError:
                pass
        deadline = time.monotonic() + grace
        while time.monotonic() < deadline and any(processes_in_session(s) for s in sessions):
            time.sleep(0.1)


class RayHead:
    """Start a Ray head on 127.0.0.1 with free ports; stop all of its processes after."""

    def __init__(
        self,
        num_cpus: float = 8,
        *,
        auth_token: str | None = None,
        log: Path | None = None,
        worker_cpus: float | None = None,
    ) -> None:
        self.num_cpus = num_cpus
        self.worker_cpus = worker_cpus
        """CPUs of a second (worker) node, or None for a single-node cluster."""
        self.worker_session: int | None = None
        self.auth_token = auth_token
        self.temp_dir = Path(tempfile.mkdtemp(prefix="prh", dir="/tmp"))
        (
            self.gcs_port,
            self.dashboard_port,
            self.client_port,
            self.node_manager_port,
            self.object_manager_port,
            self.agent_http_port,
            self.agent_grpc_port,
            self.metrics_port,
            self.runtime_env_port,
            self.http_port,
        ) = free_ports(10)
        self.dashboard_url = f"http://127.0.0.1:{self.dashboard_port}"
        self.serve_url = f"http://127.0.0.1:{self.http_port}"
        self.session: int | None = None
        self.log = log or self.temp_dir / "ray-start.log"

    def command(self) -> list[str]:
        ray = shutil.which("ray") or str(Path(sys.executable).parent / "ray")
        return [
            ray,
            "start",
            "--head",
            "--node-ip-address=127.0.0.1",
            f"--port={self.gcs_port}",
            "--dashboard-host=127.0.0.1",
            f"--dashboard-port={self.dashboard_port}",
            f"--ray-client-server-port={self.client_port}",
            f"--node-manager-port={self.node_manager_port}",
            f"--object-manager-port={self.object_manager_port}",
            f"--dashboard-agent-listen-port={self.agent_http_port}",
            f"--dashboard-agent-grpc-port={self.agent_grpc_port}",
            f"--metrics-export-port={self.metrics_port}",
            f"--runtime-env-agent-port={self.runtime_env_port}",
            f"--num-cpus={self.num_cpus:g}",
            "--object-store-memory=200000000",
            f"--temp-dir={self.temp_dir}",
            "--disable-usage-stats",
        ]

    def worker_command(self) -> list[str]:
        ray = shutil.which("ray") or str(Path(sys.executable).parent / "ray")
        ports = free_ports(6)
        return [
            ray,
            "start",
            f"--address=127.0.0.1:{self.gcs_port}",
            "--node-ip-address=127.0.0.1",
            f"--node-manager-port={ports[0]}",
            f"--object-manager-port={ports[1]}",
            f"--dashboard-agent-listen-port={ports[2]}",
            f"--dashboard-agent-grpc-port={ports[3]}",
            f"--metrics-export-port={ports[4]}",
            f"--runtime-env-agent-port={ports[5]}",
            f"--num-cpus={self.worker_cpus:g}",
            "--object-store-memory=200000000",
            "--disable-usage-stats",
        ]

    def _env(self) -> dict[str, str]:
        env = dict(
            os.environ,
            RAY_USAGE_STATS_ENABLED="0",
            PYTHONUNBUFFERED="1",
            # no idle workers prestarted per logical CPU: on 2 cores they only cost time
            RAY_enable_worker_prestart="0",
            RAY_prestart_worker_first_driver="0",
            # the dashboard's CPU profiling of a worker (py-spy), for `peach profile --url`
            RAY_DASHBOARD_ENABLE_PROFILING="1",
            # what an idle cluster burns, measured on the semantics deploy (37 replicas): 56 %
            # of a core with Serve's defaults, 39 % with a 2 s export and a 0.5 s loop. By
            # default every replica exports its metrics each 100 ms (peach reads none of them)
            # and the controller loops each 100 ms (0.25 s here: a deploy's steps stay quick)
            RAY_SERVE_METRICS_EXPORT_INTERVAL_MS="2000",
            RAY_SERVE_CONTROL_LOOP_INTERVAL_S="0.25",
        )
        env.pop("RAY_ADDRESS", None)
        # a worker then caches what it compiles of the packages it unpacked (peach's runtime
        # package): the next replica of the same package reads it, as on a real node
        env.pop("PYTHONDONTWRITEBYTECODE", None)
        env.pop("RAY_AUTH_TOKEN", None)
        env.pop("RAY_AUTH_TOKEN_PATH", None)
        if self.auth_token:  # the dashboard then wants "Authorization: Bearer <token>"
            env.update(RAY_AUTH_MODE="token", RAY_AUTH_TOKEN=self.auth_token)
        else:  # never pick up a token file of the machine's user
            env["RAY_AUTH_MODE"] = "disabled"
        return env

    def _run_start(self, command: list[str], log_path: Path) -> int:
        """Run one `ray start` in a new session; return that session's id. A start whose
        GCS did not answer in time (``Deadline Exceeded``: a machine busy with other work)
        is stopped and made once more."""
        try:
            return self._run_start_once(command, log_path)
        except RuntimeError as error:
            if "Deadline Exceeded" not in str(error):
                raise
            return self._run_start_once(command, log_path)

    def _run_start_once(self, command: list[str], log_path: Path) -> int:
        with open(log_path, "wb") as log:
            process = subprocess.Popen(
                command,
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                start_new_session=True,
                env=self._env(),
                cwd=self.temp_dir,
            )
        try:
            process.wait(timeout=START_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            _stop_session(process.pid)
            raise RuntimeError(f"ray start did not return in {START_TIMEOUT_S:.0f} s") from None
        if process.returncode != 0:
            text = log_path.read_text(errors="replace")[-3000:]
            _stop_session(process.pid)
            raise RuntimeError(f"ray start failed ({process.returncode}):\n{text}")
        return process.pid  # a new session's id is its leader's pid

    def start(self) -> RayHead:
        try:
            self.session = self._run_start(self.command(), self.log)
            self._wait_for_dashboard()
            if self.worker_cpus is not None:
                self.worker_session = self._run_start(
                    self.worker_command(), self.temp_dir / "ray-start-worker.log"
                )
                self._wait_for_nodes(2)
        except BaseException:
            self.stop()
            raise
        return self

    def _headers(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.auth_token}"} if self.auth_token else {}

    def _wait_for_nodes(self, count: int) -> None:
        """Poll the dashboard until ``count`` nodes are alive."""
        deadline = time.monotonic() + 60
        while True:
            try:
                response = httpx.get(
                    f"{self.dashboard_url}/nodes?view=summary", headers=self._headers(), timeout=5
                )
                nodes = response.json()["data"]["summary"]
                if sum(1 for n in nodes if n["raylet"]["state"] == "ALIVE") >= count:
                    return
            except (httpx.HTTPError, ValueError, KeyError, TypeError):
                pass
            if time.monotonic() > deadline:
                raise RuntimeError(f"{count} Ray nodes were not alive within 60 s")
            time.sleep(0.2)

    def start_serve(self) -> None:
        """Start Serve with its HTTP proxy on the head only, on ``http_port``.

        The nodes of this cluster share 127.0.0.1, so a proxy per node (Serve's default)
        would find the port taken on the second node.
        """
        response = httpx.put(
            f"{self.dashboard_url}/api/serve/applications/",
            json={
                "proxy_location": "HeadOnly",
                "http_options": {"host": "127.0.0.1", "port": self.http_port},
                "applications": [],
            },
            headers=self._headers(),
            timeout=120,
        )
        response.raise_for_status()

    def _wait_for_dashboard(self) -> None:
        deadline = time.monotonic() + 30
        while True:
            try:
                headers = {"Authorization": f"Bearer {self.auth_token}"} if self.auth_token else {}
                response = httpx.get(
                    f"{self.dashboard_url}/api/version", headers=headers, timeout=2
                )
                if response.status_code == 200:
                    return
            except httpx.HTTPError:
                pass
            if time.monotonic() > deadline:
                self.stop()
                raise RuntimeError("the Ray dashboard did not answer within 30 s")
            time.sleep(0.2)

    def stop(self) -> None:
        """SIGTERM every process of the nodes' sessions, then SIGKILL what is left."""
        sessions = [s for s in (self.worker_session, self.session) if s is not None]
        _stop_sessions(sessions)
        self.session = self.worker_session = None
        shutil.rmtree(self.temp_dir, ignore_errors=True)

    def __enter__(self) -> RayHead:
        return self.start()

    def __exit__(self, *exc_info: object) -> None:
        self.stop()


if __name__ == "__main__":  # for manual runs: python tests/ray_cluster.py [CPUS [WORKER_CPUS]]
    head = RayHead(
        num_cpus=float(sys.argv[1]) if len(sys.argv) > 1 else 8,
        worker_cpus=float(sys.argv[2]) if len(sys.argv) > 2 else None,
    ).start()
    if head.worker_cpus is not None:
        head.start_serve()
    print(head.dashboard_url, head.serve_url, "session", head.session, flush=True)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    signal.signal(signal.SIGINT, lambda *_: sys.exit(0))
    try:
        signal.pause()
    finally:
        head.stop()
