"""The pause before a replica's restart under `peach dev` (``simulator.supervisor``).

A replica that keeps crashing soon after its start is restarted after a growing pause (0,
0.5, 1, 2, 5 s), so a crash loop cannot keep a core busy. A replica that was serving and
was stopped from outside — a ``kill``, the kernel's OOM killer, or `peach fuzz` stopping a
replica still busy on a call that timed out — has no crash to loop on: it restarts at once.
Before, each such stop climbed the ladder, and `peach fuzz` on an endpoint that spins past
its timeout waited 5 s for every request after the fourth (a 10-example run took minutes).
"""

from __future__ import annotations

import signal

import pytest

from simulator.supervisor import RESTART_PAUSES_S, ProcessSupervisor


def _supervisor() -> ProcessSupervisor:
    return ProcessSupervisor(spawner=None, on_output=print)  # type: ignore[arg-type]


def _pauses(supervisor: ProcessSupervisor, returncode: int | None, *, ready: bool) -> list[float]:
    pauses = []
    for _ in range(6):
        if ready:
            supervisor.ready()
        pauses.append(supervisor.next_pause(returncode))
    return pauses


@pytest.mark.parametrize("stopped_by", [signal.SIGKILL, signal.SIGTERM, signal.SIGINT])
def test_a_serving_replica_stopped_from_outside_restarts_at_once_every_time(
    stopped_by: signal.Signals,
) -> None:
    supervisor = _supervisor()
    assert _pauses(supervisor, -stopped_by, ready=True) == [0.0] * 6
    assert supervisor.restarted


@pytest.mark.parametrize("returncode", [3, 1, -signal.SIGSEGV, -signal.SIGABRT, None])
def test_a_replica_that_keeps_crashing_after_its_start_waits_longer_each_time(
    returncode: int | None,
) -> None:
    supervisor = _supervisor()
    assert _pauses(supervisor, returncode, ready=True) == [*RESTART_PAUSES_S, RESTART_PAUSES_S[-1]]


def test_a_replica_killed_before_it_was_ready_still_climbs_the_ladder() -> None:
    """Killed during its start (an init that hangs, then a kill) is no proof it serves."""
    supervisor = _supervisor()
    assert _pauses(supervisor, -signal.SIGKILL, ready=False) == [
        *RESTART_PAUSES_S,
        RESTART_PAUSES_S[-1],
    ]


def test_a_crash_during_the_restart_of_a_long_lived_replica_is_paced() -> None:
    """The start of the process that died counts, not that of the one before it: a replica
    that served for an hour, then crashes in every restart's init, is not restarted in a
    tight loop."""
    supervisor = _supervisor()
    supervisor.ready()
    supervisor._ready_at -= 3600  # it served for an hour
    assert supervisor.next_pause(3) == 0.0  # it ran long: the ladder starts again
    # each restart now dies in its init, never ready
    assert [supervisor.next_pause(3) for _ in range(4)] == list(RESTART_PAUSES_S[1:])
