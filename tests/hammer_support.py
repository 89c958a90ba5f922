"""A thread that requests endpoints in a loop while a test changes the server under it.

    hammer = Hammer(dev.url, {"/hello": lambda r: r.json()["result"] == "v1"}).start()
    began = time.monotonic(); <edit, wait for the reload>; ended = time.monotonic()
    hammer.finish(began, ended)

Every request is recorded with when it was sent and when its answer came. Anything that
goes wrong in the thread (a status, a body the check refuses, a transport error, an
exception of the check itself) is a failure, never a thread that dies quietly. ``finish``
keeps hammering until a request sent after ``ended`` is answered, then asserts that none
failed and that requests were answered before ``began``, sent and answered between
``began`` and ``ended``, and sent after ``ended``: the hammer ran through the whole change.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass

import httpx
from waiting import poll

Check = Callable[[httpx.Response], bool]


@dataclass(frozen=True)
class Shot:
    path: str
    sent: float
    answered: float
    failure: str | None


class Hammer:
    def __init__(self, base_url: str, checks: Mapping[str, Check], timeout_s: float = 20.0):
        self.base_url = base_url
        self.checks = dict(checks)
        self.timeout_s = timeout_s
        self.shots: list[Shot] = []
        self.crash: str | None = None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def start(self) -> Hammer:
        self._thread.start()
        poll(lambda: self.shots or self.crash, "the first hammer request", tolerate=())
        return self

    def _run(self) -> None:
        try:
            with httpx.Client(base_url=self.base_url, timeout=self.timeout_s) as client:
                while not self._stop.is_set():
                    for path, check in self.checks.items():
                        self.shots.append(self._shoot(client, path, check))
        except BaseException as error:  # noqa: BLE001 - a dead hammer is a failure too
            self.crash = repr(error)

    @staticmethod
    def _shoot(client: httpx.Client, path: str, check: Check) -> Shot:
        sent = time.monotonic()
        failure: str | None = None
        try:
            response = client.get(path)
            if response.status_code != 200 or not check(response):
                failure = f"{response.status_code} {response.text[:200]}"
        except Exception as error:  # noqa: BLE001 - every exception is recorded
            failure = repr(error)
        return Shot(path, sent, time.monotonic(), failure)

    @contextmanager
    def stopped_on_error(self) -> Iterator[None]:
        """Stop the thread if the block fails (``finish`` is then never reached)."""
        try:
            yield
        except BaseException:
            self.stop()
            raise

    def stop(self) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(timeout=self.timeout_s + 10)

    def failures(self) -> list[str]:
        return [f"{s.path}: {s.failure}" for s in self.shots if s.failure]

    def finish(self, began: float, ended: float, timeout_s: float = 30.0) -> None:
        """Stop once a request sent after ``ended`` is answered; assert the whole window."""
        try:
            poll(
                lambda: self.crash or any(s.sent > ended for s in self.shots),
                "a hammer request sent after the change",
                timeout_s,
                tolerate=(),
            )
        finally:
            self.stop()
        assert not self._thread.is_alive(), "the hammer thread did not stop"
        assert self.crash is None, f"the hammer thread died: {self.crash}"
        failures = self.failures()
        assert failures == [], f"{len(failures)} of {len(self.shots)} failed: {failures[:5]}"
        before = [s for s in self.shots if s.answered < began]
        during = [s for s in self.shots if began <= s.sent and s.answered <= ended]
        after = [s for s in self.shots if s.sent > ended]
        assert before and during and after, (
            f"requests before / during / after the change: "
            f"{len(before)} / {len(during)} / {len(after)}"
        )
