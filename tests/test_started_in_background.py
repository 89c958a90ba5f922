"""The suite does not depend on how it is started.

A background job (`.ci/run &`, nohup, a CI runner without a terminal) starts with SIGINT
ignored, and children inherit an ignored signal across exec. The Ctrl-C tests then hang
unless the suite gives its children the default disposition back (tests/conftest.py).
"""

from __future__ import annotations

import signal
import subprocess
import sys

import pytest
from conftest import REPO


def _ignore_sigint() -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)


@pytest.mark.slow
def test_ctrl_c_tests_pass_when_the_suite_starts_with_sigint_ignored() -> None:
    run = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "-q",
            "-p",
            "no:cacheprovider",
            "tests/test_ask_cli.py",
            "-k",
            "ctrl_c and piped",
        ],
        cwd=REPO,
        preexec_fn=_ignore_sigint,
        capture_output=True,
        text=True,
        timeout=90,
    )
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-2000:]
    assert "1 passed" in run.stdout
