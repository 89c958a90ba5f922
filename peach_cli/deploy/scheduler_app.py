"""The project's task scheduler on Ray: the deployment ``tasks`` of its application.

One replica hosts the shared loop (``peach_cli.runtime.taskloop.TaskLoop``, the one ``peach
dev --tasks`` runs) and runs each of its runs as a Ray job through the dashboard's Jobs API,
as ``peach task run --address`` does (``runs``): the task's py_env's requirements, env_vars
and secrets, the project package, the payload. It follows the job's log — each line printed
to this replica's stdout prefixed with the task's name, where ``peach logs APP`` finds it —
stops the job past the task's ``timeout_s`` (Ray kills the job's process group), and stops
the running one when the replica stops (``peach delete``, a redeploy that replaces it).

What it runs is its ``user_config`` (``peach_cli.deploy.scheduler.scheduler_deployment``): the tasks' job requests, their
timeouts, whether the loop runs and its pause. Serve hands a changed one to ``reconfigure``
without restarting the replica, so a redeploy keeps the queue and the counts, and a changed
task applies from its next run.

Its methods, through a Serve handle:

* ``trigger(task, payload)``: queue a run, ``{"run_id": ...}`` at once, or ``{"error": ...}``
  for an unknown task (``trigger_task_with_event`` raises it as ``ValueError``);
* ``status()``: every task's row, as the dev view shows it.
"""

from __future__ import annotations

import asyncio
import logging
import os
import time
import uuid
from typing import Any

from ray import serve

from peach_cli.deploy.runs import TERMINAL, JobsREST, LogFollower, ended_with, run_request
from peach_cli.deploy.start_priority import serve_at_full_priority
from peach_cli.runtime.taskloop import (
    DEFAULT_INTERVAL_S,
    Run,
    RunStatus,
    TaskChanged,
    TaskEvent,
    TaskLoop,
    TaskOutput,
    TaskRunEnded,
    UnknownTask,
)
from peach_cli.runtime.triggers import APP_ENV, SCHEDULER_DEPLOYMENT

logger = logging.getLogger("ray.serve")

POLL_S = 0.25
"""How often a running job's status and log are read."""
STOP_WAIT_S = 30.0


READY_POLL_S = 1.0
DEPLOYING = frozenset({"NOT_STARTED", "DEPLOYING"})


def _application_status(app_name: str) -> str:
    """The application's status as the Serve controller reports it (``RUNNING``, …)."""
    from ray.serve.context import _get_global_client

    client = _get_global_client()
    details = client.get_serve_details() if client is not None else {}
    status = ((details.get("applications") or {}).get(app_name) or {}).get("status", "")
    return str(getattr(status, "value", status))


def _dashboard_url() -> str:
    """Where the cluster's dashboard listens (the GCS knows)."""
    try:
        from ray._private.services import get_webui_url_from_internal_kv

        found = get_webui_url_from_internal_kv()
    except Exception:  # noqa: BLE001 - the default address then
        found = None
    return found or "127.0.0.1:8265"


@serve.deployment
class ServeTaskScheduler:
    """The loop of a deployed project's tasks; each run a Ray job."""

    def __init__(self) -> None:
        self.app = serve.get_replica_context().app_name
        os.environ[APP_ENV] = self.app
        self.jobs = JobsREST(_dashboard_url())
        self.config: dict[str, Any] = {}
        self.ready = asyncio.Event()
        """Set once the application's replicas are up: the loop's first round waits for it
        (as under ``peach dev``); triggered runs do not."""
        self.loop = TaskLoop([], self, ready=self.ready)
        self._watching: asyncio.Task[None] | None = None
        self._runner: asyncio.Task[None] | None = None
        self._current: str | None = None
        """The submission id of the job running now."""
        serve_at_full_priority()  # started low, as every replica of the application

    async def reconfigure(self, config: dict[str, Any]) -> None:
        """A deploy's config: the tasks as they are now (from their next run), the loop."""
        self.config = config
        self.loop.set_tasks(config.get("names") or ())
        interval = float(config.get("interval_s") or DEFAULT_INTERVAL_S)
        self.loop.set_loop(bool(config.get("loop")), interval)
        if self._runner is None:
            running = asyncio.get_running_loop()
            self._watching = running.create_task(self._wait_for_the_application())
            self._runner = running.create_task(self.loop.run_forever())

    async def _wait_for_the_application(self) -> None:
        """Set ``ready`` once the application is deployed (its replicas up, or failed): a
        run's job unpacking the project package while the replicas are still unpacking it
        is avoided, and the first round sees the replicas its tasks may talk to."""
        while True:
            try:
                status = await asyncio.to_thread(_application_status, self.app)
            except Exception as error:  # noqa: BLE001 - the controller is busy: ask again
                logger.debug("cannot read the application's status: %s", error)
                status = ""
            if status and status not in DEPLOYING:
                self.ready.set()
                return
            await asyncio.sleep(READY_POLL_S)

    # -- what replicas and tasks call ------------------------------------------------------

    async def trigger(self, task: str, payload: str | None = None) -> dict[str, Any]:
        """Queue a run of ``task`` (payload: JSON text): its run id, or why not."""
        try:
            return {"run_id": self.loop.trigger(task, payload)}
        except UnknownTask as error:
            return {"error": str(error)}

    async def status(self) -> list[dict[str, Any]]:
        """Every task's row (``TaskChanged.to_dict``)."""
        return [row.to_dict() for row in self.loop.rows()]

    def check_health(self) -> None:
        if self._runner is not None and self._runner.done() and not self._runner.cancelled():
            error = self._runner.exception()
            raise RuntimeError(f"the task loop ended: {error!r}")

    # -- TaskHost --------------------------------------------------------------------------

    async def refresh(self) -> None:
        """Nothing to re-read: a redeploy hands the new tasks to ``reconfigure``."""

    def emit(self, event: TaskEvent) -> None:
        match event:
            case TaskOutput(task=task, line=line):
                print(f"{task} | {line}", flush=True)
            case TaskRunEnded():
                print(f"{event.task} | {event.message}", flush=True)
            case TaskChanged():
                pass

    async def execute(self, run: Run) -> TaskRunEnded:
        """``run`` as a Ray job; past the task's ``timeout_s`` the job is stopped."""
        codops = self.config.get("codops", self.app)
        number = run.run_id.rpartition("#")[2]
        submission = f"peach-{codops}-{run.task}-{number}-{uuid.uuid4().hex[:8]}"
        body = run_request(
            self.config["tasks"][run.task], submission, run.payload, {APP_ENV: self.app}
        )
        limit = float(self.config.get("timeouts", {}).get(run.task) or 3600.0)
        submitted = time.monotonic()
        try:
            await asyncio.to_thread(self.jobs.submit, body)
        except Exception as error:  # noqa: BLE001 - the dashboard refused it: a failed run
            message = f"the Ray job could not be submitted: {error}"
            return _ended(run, RunStatus.FAILED, submitted, error=message)
        self._current = submission
        follower = LogFollower(lambda line: self.emit(TaskOutput(run.task, run.run_id, line)))
        try:
            return await self._follow(run, submission, follower, limit)
        except asyncio.CancelledError:
            await asyncio.shield(asyncio.to_thread(self._stop, submission))
            raise
        finally:
            self._current = None

    async def _follow(
        self, run: Run, submission: str, follower: LogFollower, limit: float
    ) -> TaskRunEnded:
        """Poll the job until it ends (its lines emitted as they come) or runs past ``limit``
        seconds from when it started running (the env's setup is not the run's time)."""
        since = time.monotonic()
        running = False
        while True:
            status = await asyncio.to_thread(self.jobs.status, submission)
            state = str(status.get("status", ""))
            logs = await asyncio.to_thread(self.jobs.logs, submission)
            follower.feed(logs, final=state in TERMINAL)
            if state in TERMINAL:
                return _outcome(run, state, status, follower.lines, since)
            if not running and state == "RUNNING":
                running, since = True, time.monotonic()
            if running and time.monotonic() - since > limit:
                await asyncio.to_thread(self._stop, submission)
                follower.feed(await asyncio.to_thread(self.jobs.logs, submission), final=True)
                return _ended(
                    run,
                    RunStatus.TIMED_OUT,
                    since,
                    error=f"timed out after {limit:g} s",
                    timeout_s=limit,
                )
            await asyncio.sleep(POLL_S)

    def _stop(self, submission: str) -> None:
        """Stop the job (Ray kills its process group) and wait until it says so."""
        try:
            self.jobs.stop(submission)
            deadline = time.monotonic() + STOP_WAIT_S
            while time.monotonic() < deadline:
                if str(self.jobs.status(submission).get("status", "")) in TERMINAL:
                    return
                time.sleep(0.2)
        except Exception as error:  # noqa: BLE001 - the dashboard went away with the cluster
            logger.warning("cannot stop the Ray job %s: %s", submission, error)

    def __del__(self) -> None:
        """The replica stops (``peach delete``, a replacement): nothing of it keeps running."""
        for work in (getattr(self, "_runner", None), getattr(self, "_watching", None)):
            if work is not None:
                work.cancel()
        current = getattr(self, "_current", None)
        if current is not None:
            logger.warning("stopping the Ray job %s: the scheduler stops", current)
            self._stop(current)


def _ended(run: Run, status: RunStatus, since: float, **fields: Any) -> TaskRunEnded:
    seconds = time.monotonic() - since
    return TaskRunEnded(run.task, run.run_id, status, seconds, triggered=run.triggered, **fields)


def _outcome(
    run: Run, state: str, status: dict[str, Any], lines: list[str], since: float
) -> TaskRunEnded:
    """How an ended job went: what it returned, or its error and traceback."""
    result, error, traceback = ended_with(run.task, lines)
    if state == "SUCCEEDED":
        return _ended(run, RunStatus.OK, since, result=result)
    if state == "STOPPED":
        return _ended(run, RunStatus.STOPPED, since)
    message = str(status.get("message") or "").strip().splitlines()
    reason = error or (message[0] if message else "the Ray job failed")
    return _ended(run, RunStatus.FAILED, since, error=reason, traceback=traceback)


__all__ = ["SCHEDULER_DEPLOYMENT", "ServeTaskScheduler"]
