"""Hot patches: the running replicas of a component switch to new code and keep their state.

A patch is what ``apply_plan`` does instead of a restart when a save changed only a
component's method (``simulator.changes`` decides). It has two phases, so that the
replicas of a component never serve two versions and a patch that fails anywhere changes
nothing:

1. *prepare*: every replica executes the new code in a new module of its own, beside the
   code in use (``ComponentRunner.prepare_patch``); ``init`` does not run;
2. *commit* (all prepared) or *drop* (any failed): each replica switches its method to the
   new one, keeping the state ``init`` returned. Calls already running finish on the old
   function; the next call runs the new one.

Both are messages on the replica's socket (``Patch``, answered ``PatchReady`` or
``PatchFailed``; ``CommitPatch``), sent here through the replica's requests (``Replica.ask``,
``Replica.notify``); a replica that committed serves the new spec (``Replica.adopt``).

Usage (inside the server's loop)::

    outcome = await patch_pool(pool, new_spec)
    if not outcome.ok:
        print(outcome.error)   # the old code still serves; the caller restarts instead

    errors = await patch_pools(pools, new_plan.components(), keys)   # several at once
"""

from __future__ import annotations

import asyncio
from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass

from peach_cli.runtime.plan import ComponentSpec
from peach_cli.runtime.protocol import CommitPatch, Message, Patch, PatchFailed, PatchReady
from simulator.pool import ReplicaPool
from simulator.replica import Replica, ReplicaGone

PATCH_TIMEOUT_S = 10.0
"""How long the new code may take to run in a replica before the patch is given up."""


@dataclass(frozen=True)
class PatchOutcome:
    """What ``patch_pool`` did: ``ok`` (every replica serves the new code) or the error."""

    ok: bool
    error: str | None = None


@dataclass
class _Prepared:
    """What one replica made of the new code: ``request_id`` the patch was sent as (None:
    never sent), and ``error`` (None: ready to commit), or the method kind it found."""

    request_id: int | None = None
    error: str | None = None
    method_kind: str | None = None


async def _prepare(replica: Replica, spec: ComponentSpec, timeout_s: float) -> _Prepared:
    """Have ``replica``'s process execute ``spec``'s code beside the code in use: ready, or
    the error saying why not (the code raised, the process is gone, it took over
    ``timeout_s``)."""
    prepared = _Prepared()

    def patch(request_id: int) -> Message:
        prepared.request_id = request_id
        return Patch(request_id, spec)

    try:
        answer = await replica.ask(patch, (PatchReady, PatchFailed), timeout_s)
    except ReplicaGone as gone:
        prepared.error = str(gone)
        return prepared
    except TimeoutError:
        prepared.error = f"the new code did not finish running within {timeout_s:g} s"
        return prepared
    match answer:
        case PatchReady(method_kind=kind):
            prepared.method_kind = kind
        case PatchFailed(message=message):
            # The traceback is not logged here: the restart that follows a failed patch
            # runs the same code and reports it, with the error, if it fails again.
            prepared.error = message
    return prepared


def _commit(replica: Replica, prepared: _Prepared, spec: ComponentSpec, *, commit: bool) -> None:
    """Serve (``commit``) or drop the code ``replica`` prepared. Calls sent after this run
    the new method: the process reads its messages in order."""
    if prepared.request_id is not None:
        replica.notify(CommitPatch(prepared.request_id, commit))
    if commit:
        replica.adopt(spec, prepared.method_kind)


def unpatchable(pool: ReplicaPool) -> str | None:
    """Why ``pool`` cannot be patched now (a replica is not serving), or None."""
    for replica in pool.replicas:
        if not replica.serving:
            return f"replica {replica.id} is {replica.state.value}"
    return None


async def patch_pool(
    pool: ReplicaPool, spec: ComponentSpec, *, timeout_s: float = PATCH_TIMEOUT_S
) -> PatchOutcome:
    """Patch every replica of ``pool`` with ``spec``'s code, or none of them."""
    blocked = unpatchable(pool)
    if blocked is not None:
        return PatchOutcome(False, blocked)
    replicas = list(pool.replicas)
    prepared = await asyncio.gather(*(_prepare(r, spec, timeout_s) for r in replicas))
    errors = [each.error for each in prepared if each.error is not None]
    error = errors[0] if errors else unpatchable(pool)  # one died while it prepared
    for replica, each in zip(replicas, prepared, strict=True):
        _commit(replica, each, spec, commit=error is None)
    if error is not None:
        return PatchOutcome(False, error)
    pool.spec = spec
    return PatchOutcome(True)


async def patch_pools(
    pools: Mapping[str, ReplicaPool], specs: Iterable[ComponentSpec], keys: Collection[str]
) -> dict[str, str | None]:
    """Patch the running pools of ``keys`` with their code in ``specs``, all at once: each
    key patched -> None, each that could not be -> why (it is restarted instead)."""
    targets = [(pools[s.key], s) for s in specs if s.key in keys and s.key in pools]
    # Not shielded: cancelled (a newer save), no replica has committed — the commit
    # follows every prepare with no await between — so nothing changes.
    outcomes = await asyncio.gather(*(patch_pool(pool, spec) for pool, spec in targets))
    return {
        spec.key: None if outcome.ok else (outcome.error or "the patch failed")
        for (_, spec), outcome in zip(targets, outcomes, strict=True)
    }
