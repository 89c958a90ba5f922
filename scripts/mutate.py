"""Break one behaviour at a time and run the tests that claim it: a small mutation check of
the request contract (``peach_cli/runtime/contract/``), the output boundary
(``peach_cli/printable.py``, the secret masks of ``peach_cli/boundary.py``) and the local
service checks (``simulator/local_service.py``, ``peach_cli/internal.py``).

Each break is a text edit of one source file. The file is restored after its tests ran —
always: on a failure, on Ctrl-C, on SIGTERM; and a run killed outright leaves a copy in the
git folder that the next run puts back first. The score is breaks caught / breaks applied.
Before the breaks, each set of tests runs once on the code as it is: a set that fails there
would catch every break and prove nothing (the run stops).

    ./scripts/mutate              # every break (a few minutes)
    ./scripts/mutate mask host    # only the breaks whose name contains "mask" or "host"
    ./scripts/mutate --list       # the breaks and the tests that claim them
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
RUN_TIMEOUT_S = 900

CONTRACT = (
    "tests/test_contract.py",
    "tests/test_gateway_semantics.py",
    "tests/test_ab_dev.py",
    "tests/test_faults.py",
    "tests/test_fuzz_http.py",
)
PRINTABLE = (
    "tests/test_boundary.py",
    "tests/test_local_service.py",
    "tests/test_fuzz_http.py",
    "tests/test_hostile_conf.py",
    "tests/test_validate_fuzz.py",
)
MASKS = (
    "tests/test_boundary.py",
    "tests/test_secrets.py",
    "tests/test_secrets_validate.py",
    "tests/test_exposure.py",
)
LOCAL_SERVICE = (
    "tests/test_local_service.py",
    "tests/test_fastlane.py",
    "tests/test_reload_patch.py",
)

REQUEST = "peach_cli/runtime/contract/request.py"
AB = "peach_cli/runtime/contract/ab.py"
ANSWERS = "peach_cli/runtime/contract/answers.py"
ERRORS = "peach_cli/runtime/contract/errors.py"
BINDING = "peach_cli/runtime/contract/binding.py"
RESULTS = "peach_cli/runtime/contract/results.py"
SECRETS = "peach_cli/boundary.py"
LOCAL = "simulator/local_service.py"


@dataclass(frozen=True)
class Break:
    name: str
    path: str
    before: str
    """Text that occurs exactly once in the file; replaced by ``after``."""
    after: str
    tests: tuple[str, ...]


BREAKS = (
    # -- the request contract ----------------------------------------------------------------
    Break(
        "contract: any method is accepted (no 405)",
        REQUEST,
        "if http_method.upper() not in ALLOWED_METHODS:",
        "if False:",
        CONTRACT,
    ),
    Break(
        "contract: a body up to twice the limit is accepted (413 late)",
        REQUEST,
        "if len(body) > max_body_bytes:",
        "if len(body) > 2 * max_body_bytes:",
        CONTRACT,
    ),
    Break(
        "contract: a repeated query key keeps only its last value",
        REQUEST,
        "query[key] = [previous, value]",
        "query[key] = value",
        CONTRACT,
    ),
    Break(
        "contract: stream in the body is ignored",
        REQUEST,
        'stream = is_truthy(payload.pop("stream"))',
        'payload.pop("stream")',
        CONTRACT,
    ),
    Break(
        "contract: stream=yes is not a stream",
        REQUEST,
        '_TRUTHY = frozenset({"true", "1", "yes", "y", "on"})',
        '_TRUTHY = frozenset({"true", "1", "y", "on"})',
        CONTRACT,
    ),
    Break(
        "contract: a JSON body that is not an object is accepted",
        REQUEST,
        "if not isinstance(decoded, dict):",
        "if not isinstance(decoded, (dict, list)):",
        CONTRACT,
    ),
    Break(
        "contract: A/B bucket hashed little-endian",
        AB,
        'digest[:8], "big"',
        'digest[:8], "little"',
        CONTRACT,
    ),
    Break(
        "contract: A/B arm ranges off by one",
        AB,
        "if position < upper:",
        "if position <= upper:",
        CONTRACT,
    ),
    Break(
        "contract: A/B by the query's value although the body has one",
        AB,
        "value = params.body[name]",
        "value = params.query.get(name, params.body[name])",
        CONTRACT,
    ),
    Break(
        "contract: no fallback after a timeout",
        ANSWERS,
        '_FALLBACK_CODES = frozenset({"method_error", "timeout"})',
        '_FALLBACK_CODES = frozenset({"method_error"})',
        CONTRACT,
    ),
    Break(
        "contract: no fallback after an empty result",
        ANSWERS,
        "wants_fallback = primary.empty if primary.ok else",
        "wants_fallback = False if primary.ok else",
        CONTRACT,
    ),
    Break(
        "contract: the fallback's failure replaces the primary's empty result",
        ANSWERS,
        "if primary.ok:  # the primary's empty result stands",
        "if False:  # the primary's empty result stands",
        CONTRACT,
    ),
    Break(
        "contract: 413 answered as 400",
        ERRORS,
        '"payload_too_large": 413,',
        '"payload_too_large": 400,',
        CONTRACT,
    ),
    Break(
        "contract: a missing required parameter is passed as None",
        BINDING,
        """raise ContractError("bad_request", f"missing required parameter '{name}'")""",
        "kwargs[name] = None\n                continue",
        CONTRACT,
    ),
    Break(
        "contract: bool query values other than the listed ones are True",
        BINDING,
        "            return False\n        raise ValueError(value)",
        "            return False\n        return True",
        CONTRACT,
    ),
    Break(
        "contract: NaN in a result is sent",
        RESULTS,
        "if math.isnan(value) or math.isinf(value):",
        "if math.isinf(value):",
        CONTRACT,
    ),
    Break(
        "contract: an empty string result is not empty",
        RESULTS,
        "if isinstance(value, (list, dict, tuple, str, set, frozenset, bytes)):",
        "if isinstance(value, (list, dict, tuple, set, frozenset, bytes)):",
        CONTRACT,
    ),
    # -- the output boundary -----------------------------------------------------------------
    Break(
        "printable: C1 controls (\\x85, \\x9b) pass",
        "peach_cli/printable.py",
        r'_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f\u2028\u2029]")',
        r'_CONTROL = re.compile(r"[\x00-\x1f\x7f\u2028\u2029]")',
        PRINTABLE,
    ),
    Break(
        "printable: line and paragraph separators pass",
        "peach_cli/printable.py",
        r'_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f\u2028\u2029]")',
        r'_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f]")',
        PRINTABLE,
    ),
    Break(
        "printable: escape (\\x1b) passes in multi-line text",
        "peach_cli/printable.py",
        r'_CONTROL_IN_LINES = re.compile(r"[\x00-\x08\x0b-\x1f',
        r'_CONTROL_IN_LINES = re.compile(r"[\x00-\x08\x0b-\x1a\x1c-\x1f',
        PRINTABLE,
    ),
    Break(
        "printable: a line break passes in one-line text",
        "peach_cli/printable.py",
        "return _CONTROL.sub(_escape, text) if _CONTROL.search(text) else text",
        "return _CONTROL_IN_LINES.sub(_escape, text) if _CONTROL.search(text) else text",
        PRINTABLE,
    ),
    Break(
        "mask: JSON-escaped form not masked",
        SECRETS,
        '        ways.append(f"{_BACKSLASHES}{as_is}" if char != "\\\\" else _BACKSLASHES)\n',
        "        pass\n",
        MASKS,
    ),
    Break(
        "mask: percent-encoded form not masked",
        SECRETS,
        '"|" + "".join(f"%(?:25)*(?i:{b:02x})" for b in data) + ")"',
        '")"',
        MASKS,
    ),
    Break(
        "mask: base64 form not masked",
        SECRETS,
        "        alternatives.extend((len(form), _base64_pattern(form)) for form in forms)\n",
        "",
        MASKS,
    ),
    Break(
        "mask: secrets shorter than 12 characters not masked",
        SECRETS,
        "MIN_SECRET = 4\n",
        "MIN_SECRET = 12\n",
        MASKS,
    ),
    Break(
        "mask: strings inside lists not masked",
        SECRETS,
        "return [_masked_value(v, masker) for v in value]",
        "return list(value)",
        MASKS,
    ),
    Break(
        "mask: values inside objects not masked",
        SECRETS,
        "return {_masked_value(k, masker): _masked_value(v, masker) for k, v in value.items()}",
        "return dict(value)",
        MASKS,
    ),
    # -- the local-service checks ------------------------------------------------------------
    Break(
        "host: any Host header accepted",
        LOCAL,
        "allowed = name in self.hosts or _is_loopback_name(name)",
        "allowed = True",
        LOCAL_SERVICE,
    ),
    Break(
        "host: a request without Host accepted",
        LOCAL,
        "        if value is None:\n            return False",
        "        if value is None:\n            return True",
        LOCAL_SERVICE,
    ),
    Break(
        "host: the last Host header is judged, not the first",
        LOCAL,
        'if host is None:\n                    host = value.decode("latin-1")',
        'if True:\n                    host = value.decode("latin-1")',
        LOCAL_SERVICE,
    ),
    Break(
        "origin: any web origin accepted",
        LOCAL,
        'return parts.scheme in ("http", "https") and _is_loopback_name(host_name(authority))',
        "return True",
        LOCAL_SERVICE,
    ),
    Break(
        "origin: --allow-origin ignored",
        LOCAL,
        "if key in self.origins or (",
        "if False or (",
        LOCAL_SERVICE,
    ),
    Break(
        "internal: /_peach/* open to peers off loopback",
        LOCAL,
        "if not is_loopback(client):",
        "if False:",
        LOCAL_SERVICE,
    ),
    Break(
        "internal: only /_peach/ itself is guarded, not paths below it",
        "peach_cli/internal.py",
        'return path == INTERNAL_PREFIX or path.startswith(INTERNAL_PREFIX + "/")',
        "return path == INTERNAL_PREFIX",
        LOCAL_SERVICE,
    ),
)


def backup_folder() -> Path:
    """Where the file under a break is copied (inside the git folder: never committed)."""
    git_path = subprocess.run(
        ["git", "rev-parse", "--git-path", "peach-mutate"],
        cwd=REPO,
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    return (REPO / git_path).resolve()


def restore_leftovers(folder: Path) -> None:
    """Put back a file an earlier run left broken (it was killed outright)."""
    if not folder.is_dir():
        return
    for copy in folder.rglob("*"):
        if copy.is_file():
            target = REPO / copy.relative_to(folder)
            target.write_bytes(copy.read_bytes())
            copy.unlink()
            print(f"restored {target.relative_to(REPO)} from an interrupted run")


def run_tests(tests: tuple[str, ...]) -> tuple[int, str, float]:
    """Run ``tests`` (one process, stop at the first failure); exit code, the first failed
    test, seconds."""
    command = [
        sys.executable, "-m", "pytest", *tests,
        "-x", "-q", "-n", "0", "-p", "no:randomly", "-p", "no:cacheprovider",
        "-m", "not ray", "-o", "addopts=--strict-markers", "-rf",
    ]  # fmt: skip
    env = dict(os.environ, PYTHONPATH=str(REPO), PYTHONDONTWRITEBYTECODE="1")
    started = time.monotonic()
    process = subprocess.Popen(
        command, cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
    )
    try:
        output, _ = process.communicate(timeout=RUN_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()
        return -1, "(no end in time)", time.monotonic() - started
    except BaseException:
        process.terminate()
        try:
            process.wait(timeout=20)
        except subprocess.TimeoutExpired:
            process.kill()
        raise
    failed = re.search(r"^(?:FAILED|ERROR) (\S+)", output, re.MULTILINE)
    return process.returncode, failed.group(1) if failed else "", time.monotonic() - started


def apply(item: Break, folder: Path) -> str | None:
    """Break the file; its original text (or None when the text to replace is not there
    exactly once: the source changed since the break was written)."""
    path = REPO / item.path
    original = path.read_text()
    if original.count(item.before) != 1:
        return None
    copy = folder / item.path
    copy.parent.mkdir(parents=True, exist_ok=True)
    copy.write_text(original)
    path.write_text(original.replace(item.before, item.after))
    return original


def restore(item: Break, original: str, folder: Path) -> None:
    (REPO / item.path).write_text(original)
    (folder / item.path).unlink(missing_ok=True)


def main(argv: list[str]) -> int:
    def stop(signum: int, frame: object) -> None:
        raise KeyboardInterrupt(f"signal {signum}")

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGHUP, stop)
    listing = "--list" in argv
    words = [a.lower() for a in argv if not a.startswith("-")]
    chosen = [b for b in BREAKS if not words or any(w in b.name.lower() for w in words)]
    if listing:
        for item in chosen:
            print(f"{item.name}\n    {item.path}\n    {' '.join(item.tests)}")
        return 0
    folder = backup_folder()
    restore_leftovers(folder)

    for tests in dict.fromkeys(item.tests for item in chosen):
        code, failed, seconds = run_tests(tests)
        print(f"as it is: {' '.join(tests)}: exit {code} in {seconds:.0f} s", flush=True)
        if code != 0:
            print(f"the tests fail without a break ({failed or 'see pytest'}): fix them first")
            return 2

    caught: list[Break] = []
    missed: list[Break] = []
    stale: list[Break] = []
    for item in chosen:
        original = apply(item, folder)
        if original is None:
            stale.append(item)
            print(f"STALE   {item.name}: its text is not in {item.path} once", flush=True)
            continue
        try:
            code, failed, seconds = run_tests(item.tests)
        finally:
            restore(item, original, folder)
        if code == 0:
            missed.append(item)
            print(f"MISSED  {item.name} ({seconds:.0f} s)", flush=True)
        elif code in (1, -1):  # a test failed, or one hung past the run's bound
            caught.append(item)
            print(
                f"caught  {item.name}: {failed or 'no end in time'} ({seconds:.0f} s)", flush=True
            )
        else:  # pytest itself could not run (exit 2-5): the break says nothing about the tests
            stale.append(item)
            print(f"BROKEN  {item.name}: pytest exited {code} ({seconds:.0f} s)", flush=True)

    applied = len(caught) + len(missed)
    print(f"\nscore: {len(caught)}/{applied} breaks caught", end="")
    print(f" ({len(stale)} not applied or not run: see above)" if stale else "")
    for item in missed:
        print(f"  missed: {item.name} [{item.path}]")
    return 0 if not missed else 1


if __name__ == "__main__":
    try:
        sys.exit(main(sys.argv[1:]))
    except KeyboardInterrupt:
        print("\ninterrupted: every file is restored", file=sys.stderr)
        sys.exit(130)
