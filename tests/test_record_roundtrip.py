"""Record files round-trip, and replay outside the project (SPEC §6, issue 49).

A result holding a C1 control character or U+2028 is stored as JSON escapes (no raw control
character in the file), and read back it is the same value: replaying it reports no
difference. `peach replay` run outside the project takes ``-p PROJECT`` for the secret
values to mask, and says when it has no project to mask them with.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest
from cli_support import run_peach
from conftest import DevProcess, start_peach_dev
from projectkit import write_project
from waiting import poll

SECRET = "sk-roundtrip-3f9a7c1e-never-shown"
ODD = "a\x85b\u2028c\u2029d\x9f\x7fe"
CONF = """codops: roundtrip
secrets: [API_KEY]
endpoints:
  odd:
    url: /odd
    components:
      main: {notebook: nb.ipynb, method: odd}
  key:
    url: /key
    components:
      main: {notebook: nb.ipynb, method: key}
"""
CODE = f"""import os


def odd():
    return {ODD!r}


def key():
    return os.environ["API_KEY"]
"""


@pytest.fixture(scope="module")
def recorded(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[DevProcess, Path, Path]]:
    root = tmp_path_factory.mktemp("roundtrip")
    project = write_project(
        root / "project", CONF, {"nb.ipynb": [CODE]}, {".env": f"API_KEY={SECRET}\n"}
    )
    record = root / "requests.jsonl"
    dev = start_peach_dev(project, root / "peach-dev.log", "--record", str(record))
    try:
        dev.wait_ready()
        yield dev, project, record
    finally:
        dev.stop()


def test_a_result_with_c1_and_line_separators_replays_the_same(recorded, tmp_path: Path) -> None:
    import httpx

    dev, project, record = recorded
    assert httpx.get(f"{dev.url}/odd").json()["result"] == ODD
    text = poll(lambda: "/odd" in record.read_text() and record.read_text(), "the line")
    line = next(x for x in text.splitlines() if '"/odd"' in x)
    assert not any(ch in line for ch in "\x85\u2028\u2029\x9f\x7f")  # escaped in the file
    assert json.loads(line)["result"] == ODD  # read back: the same value
    mine = tmp_path / "odd.jsonl"
    mine.write_text(line + "\n")
    done = run_peach("replay", str(mine), "--url", dev.url, cwd=project)
    assert done.returncode == 0, (done.stdout, done.stderr)


def test_replay_outside_the_project_masks_with_p_and_says_when_it_cannot(
    recorded, tmp_path: Path
) -> None:
    dev, project, _ = recorded
    line = {"method": "GET", "url": "/key", "query": "", "body": None, "stream": False,
            "status": 200, "result": "not-the-key"}  # fmt: skip
    recording = tmp_path / "key.jsonl"
    recording.write_text(json.dumps(line) + "\n")
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()

    masked = run_peach(
        "replay", str(recording), "--url", dev.url, "-p", str(project), cwd=elsewhere
    )
    assert masked.returncode == 1, (masked.stdout, masked.stderr)  # the answer differs
    assert SECRET not in masked.stdout + masked.stderr
    assert "***" in masked.stdout

    unmasked = run_peach("replay", str(recording), "--url", dev.url, cwd=elsewhere)
    assert "no project here" in unmasked.stderr and "-p PROJECT" in unmasked.stderr

    missing = run_peach("replay", str(recording), "-p", str(elsewhere), cwd=elsewhere)
    assert missing.returncode == 2, (missing.stdout, missing.stderr)
