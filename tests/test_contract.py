"""The request contract's rules, host-independent (SPEC §2). HTTP behaviour is in test_gateway*."""

from __future__ import annotations

import ast
import asyncio
import dataclasses
import shutil
from pathlib import Path
from typing import Optional

import pytest

from peach_cli.runtime import contract
from peach_cli.runtime.contract import CallResult, ContractError, RequestParams, parse_request
from peach_cli.runtime.plan import ComponentSpec, EndpointSpec

SOURCE = """
import uuid
from typing import Optional

def init_state():
    return {"token": uuid.uuid4().hex}

def recommend(model, item_id: str, size: int = 3, tags: list[str] = [], exact: Optional[bool] = None):
    return {"token": model["token"], "item_id": item_id, "size": size, "tags": tags, "exact": exact}

def drifting(model):
    return [model["token"]], {"drift_detected": True}

def kwargs_only(**kwargs):
    return kwargs

def no_model(size: int = 1):
    return size

async def words(model, n: int = 3):
    for i in range(n):
        yield f"w{i} "

def sync_words(n: int = 2):
    yield "a"
    yield b"b"
"""


def runner_for(
    method: str, *, init: str | None = "init_state", args=None
) -> contract.ComponentRunner:
    """A started runner (its own event loop; calls then run under asyncio.run)."""
    runner = runner_for_loop(method, init=init, args=args)
    asyncio.run(runner.start())
    return runner


def run(coroutine):
    return asyncio.run(coroutine)


class TestParseRequest:
    def test_query_and_body_merge_with_body_winning(self) -> None:
        params, stream = parse_request("POST", [("a", "1"), ("b", "2")], b'{"b": 3}')
        assert params.query == {"a": "1", "b": "2"} and params.body == {"b": 3}
        assert not stream

    @pytest.mark.parametrize("value", ["true", "1", "yes", "TRUE"])
    def test_stream_truthy_in_query(self, value: str) -> None:
        params, stream = parse_request("GET", [("stream", value), ("q", "x")], b"")
        assert stream and "stream" not in params.query

    def test_stream_json_true_in_body_is_taken_out(self) -> None:
        params, stream = parse_request("POST", [], b'{"stream": true, "q": 1}')
        assert stream and params.body == {"q": 1}

    def test_body_stream_wins_over_query(self) -> None:
        _, stream = parse_request("POST", [("stream", "true")], b'{"stream": "false"}')
        assert not stream

    @pytest.mark.parametrize(
        ("method", "body", "code", "status"),
        [
            ("PUT", b"", "method_not_allowed", 405),
            ("DELETE", b"", "method_not_allowed", 405),
            ("POST", b"{nope", "bad_request", 400),
            ("POST", b"[1, 2]", "bad_request", 400),
            ("POST", b'"text"', "bad_request", 400),
            ("POST", b"\xff\xfe\x00", "bad_request", 400),
            ("POST", b"[" * 100_000, "bad_request", 400),
        ],
    )
    def test_refusals(self, method: str, body: bytes, code: str, status: int) -> None:
        with pytest.raises(ContractError) as caught:
            parse_request(method, [], body)
        assert (caught.value.code, caught.value.status) == (code, status)

    def test_body_over_limit_is_413(self) -> None:
        with pytest.raises(ContractError) as caught:
            parse_request("POST", [], b"{}" + b" " * 20, max_body_bytes=10)
        assert caught.value.status == 413

    def test_the_body_limit_is_exact(self) -> None:
        """A body of exactly the limit is read; one byte more is 413 (SPEC §2's limit, not
        a margin above it)."""
        at_limit = b'{"a": 1}' + b" " * 2
        params, _ = parse_request("POST", [], at_limit, max_body_bytes=len(at_limit))
        assert params.body == {"a": 1}
        with pytest.raises(ContractError) as caught:
            parse_request("POST", [], at_limit + b" ", max_body_bytes=len(at_limit))
        assert caught.value.status == 413


class TestBinding:
    def test_init_state_reaches_model_and_args_fill_defaults(self) -> None:
        runner = runner_for("recommend", args={"size": 7})
        result = run(runner.call(RequestParams(query={"item_id": "x"})))
        assert result.ok and result.result["size"] == 7
        assert result.result["token"] == runner.state["token"]

    def test_query_values_are_converted_to_annotations(self) -> None:
        runner = runner_for("recommend")
        params = RequestParams(
            query={"item_id": "x", "size": "4", "tags": ["a", "b"], "exact": "no"}
        )
        result = run(runner.call(params))
        assert result.result == {
            "token": runner.state["token"],
            "item_id": "x",
            "size": 4,
            "tags": ["a", "b"],
            "exact": False,
        }

    def test_unconvertible_and_missing_parameters_are_400_naming_them(self) -> None:
        runner = runner_for("recommend")
        bad = run(runner.call(RequestParams(query={"item_id": "x", "size": "ten"})))
        assert (bad.code, "'size'" in (bad.message or "")) == ("bad_request", True)
        missing = run(runner.call(RequestParams()))
        assert missing.code == "bad_request" and "'item_id'" in (missing.message or "")

    def test_request_can_never_set_model(self) -> None:
        runner = runner_for("recommend")
        params = RequestParams(query={"item_id": "x", "model": "hack"}, body={"init_state": 1})
        result = run(runner.call(params))
        assert result.result["token"] == runner.state["token"]

    def test_unknown_params_are_dropped_unless_kwargs(self) -> None:
        assert (
            run(runner_for("no_model", init=None).call(RequestParams(body={"zzz": 1}))).result == 1
        )
        kwargs = run(runner_for("kwargs_only").call(RequestParams(body={"zzz": 1, "model": 2})))
        assert kwargs.result == {"zzz": 1}

    @pytest.mark.parametrize(
        ("value", "annotation", "expected"),
        [
            ("3", int, 3),
            ("2.5", float, 2.5),
            ("on", bool, True),
            ("a,b", list[str], ["a", "b"]),
            ("[1, 2]", list[int], [1, 2]),
            ("", Optional[int], None),
            ("5", Optional[int], 5),
            ("x", str, "x"),
        ],
    )
    def test_convert_query_value(self, value, annotation, expected) -> None:
        assert contract.convert_query_value(value, annotation) == expected


class TestResults:
    def test_drift_answers_first_then_reinits_only_this_runner(self) -> None:
        async def scenario():
            runner = runner_for_loop("drifting")
            other = runner_for_loop("drifting")
            await runner.start()
            await other.start()
            first = await runner.call(RequestParams())
            assert runner.reinitializing
            second = await runner.call(RequestParams())
            return first, second, other.reinit_count, runner.reinit_count

        first, second, other_reinits, reinits = asyncio.run(scenario())
        assert first.drift and first.result != second.result
        assert (other_reinits, reinits) == (0, 1)

    def test_a_reinit_runs_in_the_working_dir_made_again_under_its_name(
        self, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        """Ray's agent of another node on the same machine sets up the same working_dir by
        removing the folder and unpacking it again: the replica's re-init still reads it."""
        folder = tmp_path / "working_dir"
        folder.mkdir()
        (folder / "version.txt").write_text("1")
        monkeypatch.chdir(folder)
        source = (
            "from pathlib import Path\n"
            "def init_state():\n"
            "    return (Path.cwd() / 'version.txt').read_text()\n"
            "def drifting(model):\n"
            "    return [model], {'drift_detected': model == '1'}\n"
        )
        spec = dataclasses.replace(runner_for_loop("drifting").spec, source=source)

        async def scenario():
            runner = contract.ComponentRunner(spec, Path("."))
            await runner.start()
            shutil.rmtree(folder)  # as Ray's agent does, the process still in it
            folder.mkdir()
            (folder / "version.txt").write_text("2")
            first = await runner.call(RequestParams())
            await runner.wait_reinit()
            second = await runner.call(RequestParams())
            runner.close()
            return first.result, runner.last_reinit_error, second.result

        assert asyncio.run(scenario()) == (["1"], None, ["2"])

    def test_conversions(self) -> None:
        np = pytest.importorskip("numpy")

        @dataclasses.dataclass
        class Hit:
            item: str
            score: float

        value = {"a": np.array([1, 2]), "b": np.float32(0.5), "c": (Hit("x", 1.0),), "d": {3}}
        assert contract.to_json_value(value) == {
            "a": [1, 2],
            "b": 0.5,
            "c": [{"item": "x", "score": 1.0}],
            "d": [3],
        }

    def test_non_json_names_the_type(self) -> None:
        with pytest.raises(contract.ResultNotJSON, match="object"):
            contract.to_json_value({"x": [object()]})

    @pytest.mark.parametrize("value", [None, [], {}, (), ""])
    def test_empty(self, value) -> None:
        assert contract.is_empty(value)

    def test_stream_required_when_generator_called_plainly(self) -> None:
        result = run(runner_for("words").call(RequestParams()))
        assert result.code == "stream_required"
        assert "async_generator" in result.message and "stream=true" in result.message

    def test_streams_encode_chunks(self) -> None:
        async def collect(method):
            runner = runner_for_loop(method)
            await runner.start()
            chunks = await runner.open_stream(RequestParams(query={"n": "2"}))
            return [chunk async for chunk in chunks]

        assert asyncio.run(collect("words")) == [b"w0 ", b"w1 "]
        assert asyncio.run(collect("sync_words")) == [b"a", b"b"]


def runner_for_loop(
    method: str, *, init: str | None = "init_state", args=None
) -> contract.ComponentRunner:
    """A runner to start inside the test's own event loop."""
    spec = ComponentSpec(
        endpoint="e",
        name="main",
        url="/e",
        notebook="nb.ipynb",
        source=SOURCE,
        source_name="nb.ipynb",
        method=method,
        init=init,
        args=args or {},
    )
    return contract.ComponentRunner(spec, Path("."))


class TestAnswer:
    endpoint = EndpointSpec(
        name="e",
        url="/e",
        components={},
        primary="main",
        fallback="fallback",
    )

    def answer(self, outcomes: dict[str, CallResult | float], timeout_s: float = 1.0):
        async def call(component: str, attempt: contract.Attempt) -> CallResult:
            attempt.replica = f"{component}#1"
            outcome = outcomes[component]
            if isinstance(outcome, float):
                await asyncio.sleep(outcome)  # a slow method, not synchronisation
                return CallResult(ok=True, result="late")
            return outcome

        return asyncio.run(contract.answer(self.endpoint, call, timeout_s))

    def test_primary_answer_is_enveloped(self) -> None:
        answer = self.answer({"main": CallResult(ok=True, result=[1])})
        assert (answer.status, answer.body, answer.component, answer.replica) == (
            200,
            {"result": [1], "status": "ok"},
            "main",
            "main#1",
        )

    @pytest.mark.parametrize(
        "primary",
        [
            CallResult.failure("method_error", "boom"),
            CallResult(ok=True, result=[], empty=True),
            5.0,
        ],
    )
    def test_fallback_answers_for_raise_empty_and_timeout(self, primary) -> None:
        answer = self.answer(
            {"main": primary, "fallback": CallResult(ok=True, result=["top"])}, 0.2
        )
        assert (answer.status, answer.component, answer.body["result"]) == (
            200,
            "fallback",
            ["top"],
        )

    def test_timeout_without_fallback_is_504(self) -> None:
        endpoint = dataclasses.replace(self.endpoint, fallback=None)

        async def call(component, attempt):
            attempt.replica = "main#1"
            await asyncio.sleep(5)

        answer = asyncio.run(contract.answer(endpoint, call, 0.1))
        assert answer.status == 504 and answer.body["error"]["code"] == "timeout"
        assert answer.replica == "main#1"

    def test_bad_request_does_not_fall_back(self) -> None:
        answer = self.answer(
            {
                "main": CallResult.failure("bad_request", "missing"),
                "fallback": CallResult(ok=True, result=1),
            }
        )
        assert (answer.status, answer.body["error"]["code"]) == (400, "bad_request")


DATACLASS_SOURCE = """
import dataclasses

@dataclasses.dataclass
class Hit:
    id: str
    score: float = VERSION

def init_state():
    return "kept"

def hits(model):
    return {"hit": Hit("a"), "model": model}
"""


def test_a_notebook_dataclass_works_at_load_and_after_a_patch() -> None:
    """A @dataclass looks its module up in sys.modules while the code runs."""

    def spec_for(version: float) -> ComponentSpec:
        return ComponentSpec(
            endpoint="dc",
            name="main",
            url="/dc",
            notebook="nb.ipynb",
            source=f"VERSION = {version}\n" + DATACLASS_SOURCE,
            source_name="nb.ipynb",
            method="hits",
            init="init_state",
        )

    async def scenario() -> tuple[CallResult, CallResult]:
        runner = contract.ComponentRunner(spec_for(1.0), Path("."))
        await runner.start()
        first = await runner.call(RequestParams())
        runner.commit_patch(runner.prepare_patch(spec_for(2.0)))
        return first, await runner.call(RequestParams())

    first, patched = asyncio.run(scenario())
    assert first.result == {"hit": {"id": "a", "score": 1.0}, "model": "kept"}
    assert patched.result == {"hit": {"id": "a", "score": 2.0}, "model": "kept"}


class TestABAssignment:
    """Which value picks the arm; the buckets themselves are checked over HTTP on both hosts."""

    @pytest.mark.parametrize(
        ("query", "body", "expected"),
        [
            ({"user_id": "42"}, {}, "42"),
            ({}, {"user_id": 42}, "42"),  # a JSON number hashes as the same text as ?user_id=42
            ({"user_id": "a"}, {"user_id": "b"}, "b"),  # the body wins, as for any parameter
            ({"user_id": ["a", "b"]}, {}, "b"),  # a repeated key: the last, as for scalars
            ({}, {"user_id": True}, "true"),
            ({"user_id": ""}, {}, None),
            ({}, {"user_id": None}, None),
            ({"client_id": "x"}, {}, None),
        ],
    )
    def test_the_value_that_is_hashed(self, query, body, expected) -> None:
        params = RequestParams(query=query, body=body)
        assert contract.assignment_value(params, "user_id") == expected

    def test_an_endpoint_without_ab_always_gets_its_primary(self) -> None:
        endpoint = EndpointSpec("e", "/e", {}, primary="only")
        assert contract.choose_arm(endpoint, RequestParams(query={"user_id": "x"})) == "only"

    def test_the_answer_names_the_arm_and_the_fallback_covers_it(self) -> None:
        endpoint = dataclasses.replace(TestAnswer.endpoint, primary="main")

        async def call(component: str, attempt: contract.Attempt) -> CallResult:
            attempt.replica = f"{component}#1"
            if component == "b":
                return CallResult.failure("method_error", "ValueError: b failed")
            return CallResult(ok=True, result=component)

        answered = asyncio.run(contract.answer(endpoint, call, 1.0, "b"))
        assert (answered.status, answered.body["result"], answered.component) == (
            200,
            "fallback",
            "fallback",
        )
        no_fallback = dataclasses.replace(endpoint, fallback=None)
        failed = asyncio.run(contract.answer(no_fallback, call, 1.0, "b"))
        assert (failed.status, failed.component) == (500, "b")


def test_every_name_the_contract_package_offers_loads_from_its_module() -> None:
    """The package loads its parts on first use: each name of ``__all__`` resolves, to the
    object its module defines, and nothing is offered that ``__all__`` does not list."""
    import importlib

    import peach_cli.runtime.contract as contract

    homes = contract._HOMES
    # what type checkers see (the imports under TYPE_CHECKING) is what the package loads
    tree = ast.parse(Path(contract.__file__).read_text())
    checked = {
        node.module.rsplit(".", 1)[1]: tuple(alias.name for alias in node.names)
        for node in ast.walk(tree)
        if isinstance(node, ast.ImportFrom) and node.module.startswith(contract.__name__ + ".")
    }
    assert checked == homes
    assert sorted(name for names in homes.values() for name in names) == sorted(contract.__all__)
    for module, names in homes.items():
        loaded = importlib.import_module(f"peach_cli.runtime.contract.{module}")
        for name in names:
            assert getattr(contract, name) is getattr(loaded, name)
    with pytest.raises(AttributeError):
        contract.no_such_name  # noqa: B018
