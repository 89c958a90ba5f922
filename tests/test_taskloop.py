"""The shared loop's decisions (``peach_cli.runtime.taskloop``), over a host that records
what it is asked to run: the order, triggered runs first, the pause, a new loop setting."""

from __future__ import annotations

import asyncio

import pytest

from peach_cli.runtime.taskloop import (
    Run,
    RunStatus,
    TaskChanged,
    TaskEvent,
    TaskLoop,
    TaskRunEnded,
    UnknownTask,
)


class RecordingHost:
    """Runs nothing: each run returns at once, and is recorded."""

    def __init__(self) -> None:
        self.ran: list[str] = []
        self.ran_event = asyncio.Event()

    async def refresh(self) -> None:
        pass

    async def execute(self, run: Run) -> TaskRunEnded:
        self.ran.append(run.run_id)
        self.ran_event.set()
        status = RunStatus.FAILED if run.task == "fail" else RunStatus.OK
        return TaskRunEnded(run.task, run.run_id, status, 0.5, error="boom", triggered=True)

    def emit(self, event: TaskEvent) -> None:
        pass

    async def wait_for(self, count: int) -> None:
        async with asyncio.timeout(10):
            while len(self.ran) < count:
                self.ran_event.clear()
                await self.ran_event.wait()


def test_triggered_runs_go_first_then_the_round_then_a_new_setting_ends_the_pause() -> None:
    async def scenario() -> None:
        host = RecordingHost()
        loop = TaskLoop(["a", "fail"], host, loop=True, interval_s=3600)
        assert loop.trigger("fail", '{"x": 1}') == "fail#1"
        with pytest.raises(UnknownTask, match="unknown task 'nope': the project's tasks are a"):
            loop.trigger("nope")
        runner = asyncio.get_running_loop().create_task(loop.run_forever())
        try:
            await host.wait_for(3)
            assert host.ran == ["fail#1", "a#2", "fail#3"]  # the trigger, then the round
            loop.trigger("a")
            await host.wait_for(4)  # during the pause
            assert host.ran[3] == "a#4"
            loop.set_loop(True, 3600.5)  # a redeploy's new pause: a round starts now
            await host.wait_for(6)
            assert host.ran[4:] == ["a#5", "fail#6"]
            loop.set_loop(False, 3600.5)
            await asyncio.sleep(0.05)
            assert len(host.ran) == 6
            rows = {row.task: row for row in loop.rows()}
            assert rows["a"] == TaskChanged("a", rows["a"].state, 3, 0, 0, 0.5, None)
            assert (rows["fail"].runs_failed, rows["fail"].last_error) == (3, "boom")
            assert TaskChanged.from_dict(rows["fail"].to_dict()) == rows["fail"]
        finally:
            runner.cancel()

    asyncio.run(scenario())
