"""A lock between the workers of one parallel run (pytest-xdist): any number of tests at
once, or one test ``alone``.

Every test holds a shared ``flock`` on one file for its whole run (set-up to teardown);
a test that must run alone takes it exclusive. So that the tests other workers keep
starting do not keep it shared forever, each test first passes a gate (a second file) that
the lone test holds while it waits: the others finish what they run and wait at the gate.
"""

from __future__ import annotations

import fcntl
import os
import sys
import time
from pathlib import Path

WAIT_S = 900.0
"""How long a test waits for its turn before it runs anyway (and says so): a worker never
hangs on this lock."""


class SerialLock:
    def __init__(self, folder: Path, *, alone: bool) -> None:
        """``folder``: one the workers share (the run's temporary folder)."""
        self.gate_path = folder / "serial.gate"
        self.lock_path = folder / "serial.lock"
        self.alone = alone
        self.files: list[int] = []

    def _take(self, path: Path, mode: int, deadline: float) -> None:
        handle = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
        self.files.append(handle)
        while True:
            try:
                fcntl.flock(handle, mode | fcntl.LOCK_NB)
                return
            except BlockingIOError:
                if time.monotonic() > deadline:
                    print(f"waited {WAIT_S:.0f} s for {path.name}: running anyway", file=sys.stderr)
                    return
                time.sleep(0.05)

    def __enter__(self) -> SerialLock:
        deadline = time.monotonic() + WAIT_S
        self._take(self.gate_path, fcntl.LOCK_EX if self.alone else fcntl.LOCK_SH, deadline)
        self._take(self.lock_path, fcntl.LOCK_EX if self.alone else fcntl.LOCK_SH, deadline)
        if not self.alone:  # through the gate: a lone test may now close it
            os.close(self.files.pop(0))
        return self

    def __exit__(self, *exc_info: object) -> None:
        for handle in reversed(self.files):
            os.close(handle)
        self.files.clear()
