"""What a save changed: two snapshots of the served plan in, a ``Changes`` out.

The pure part of hot reload. A ``Snapshot`` is a plan and the fingerprints of its
components, taken when it was applied; ``analyze_changes`` compares two — per component key
``started``, ``stopped``, ``patched``, ``restarted`` or ``unchanged``, with reasons, plus the
endpoints added, removed or moved to another url, and those whose A/B split changed (a url
or a split change re-routes, it restarts nothing). A component whose method alone changed
is ``patched`` (its running replicas take the new code and keep their ``init`` state;
``simulator.edits`` decides), unless the analysis is asked for restarts only::

    before = Snapshot.take(plan)
    ...  # the user saves
    changes = analyze_changes(before, Snapshot.take(new_plan), patch=True)
    changes.patched     # ['assistant/main']: only its method changed
    changes.restarted   # ['recommend/main']: its init changed
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field, replace
from typing import TYPE_CHECKING, Literal

from simulator.edits import restart_reason

if TYPE_CHECKING:
    from peach_cli.runtime.plan import ComponentSpec, ProjectPlan

Action = Literal["started", "stopped", "patched", "restarted", "unchanged"]

_FIELD_REASONS = {
    "source": "code",
    "source_name": "cell positions",
    "line_map": "cell positions",
    "modules": "imports",
    "dependencies": "py_env",
}


# --- what changed ---------------------------------------------------------------------------


@dataclass(frozen=True)
class Snapshot:
    """A plan as it was applied: each component's fingerprint and its modules' digests.

    Taken when the plan is built, because a fingerprint includes the current contents of the
    project modules a component imports: recomputing it later would see the new contents.
    """

    plan: ProjectPlan
    fingerprints: dict[str, str]
    modules: dict[str, str] = field(default_factory=dict)
    """Project module (relative path) -> digest of its contents."""
    secrets: dict[str, str] = field(default_factory=dict)
    """Secret name -> digest of its value (from the environment or ``.env``)."""

    @classmethod
    def take(cls, plan: ProjectPlan) -> Snapshot:
        """The plan and, for each component, its fingerprint as served: its spec's, and the
        values of its env_vars and secrets (a secret changed in ``.env`` or the shell
        restarts the components reading it)."""
        from peach_cli.project.secrets import secret_digests, values_digest

        root = plan.root
        components = plan.components()
        modules = plan.module_digests()
        return cls(
            plan,
            {c.key: f"{c.fingerprint(root)}.{values_digest(c, root)}" for c in components},
            modules,
            secret_digests(root, {s for c in components for s in c.secrets}),
        )

    def specs(self) -> dict[str, ComponentSpec]:
        return {c.key: c for c in self.plan.components()}

    def replace(self, key: str, other: Snapshot) -> Snapshot:
        """This snapshot with component ``key`` taken from ``other`` (or dropped if absent
        there): what is served after a restart of ``key`` was refused."""
        endpoints = dict(self.plan.endpoints)
        endpoint_name = key.split("/", 1)[0]
        endpoint = endpoints.get(endpoint_name)
        old_spec = other.specs().get(key)
        fingerprints = dict(self.fingerprints)
        if endpoint is not None:
            components = dict(endpoint.components)
            if old_spec is None:
                components.pop(key.split("/", 1)[1], None)
                fingerprints.pop(key, None)
            else:
                components[old_spec.name] = replace(old_spec, url=endpoint.url)
                fingerprints[key] = other.fingerprints[key]
            endpoints[endpoint_name] = replace(endpoint, components=components)
        modules = {**other.modules, **self.modules}
        secrets = {**other.secrets, **self.secrets}
        return Snapshot(replace(self.plan, endpoints=endpoints), fingerprints, modules, secrets)


@dataclass(frozen=True)
class ComponentChange:
    """What a reload does to one component."""

    key: str
    """``endpoint/component``."""
    action: Action
    reasons: tuple[str, ...] = ()
    """Why it restarts or is patched: ``code``, ``init``, ``args``, ``replicas``, a module
    path, ``method`` (patched), ..."""


@dataclass(frozen=True)
class Changes:
    """The difference between the served plan and a new one."""

    components: tuple[ComponentChange, ...] = ()
    endpoints_added: tuple[str, ...] = ()
    endpoints_removed: tuple[str, ...] = ()
    urls_changed: tuple[tuple[str, str, str], ...] = ()
    """(endpoint, old url, new url)."""
    timeout_changed: tuple[float, float] | None = None
    splits_changed: tuple[str, ...] = ()
    """Endpoints whose ``ab:`` test changed (added, removed, another split or ``by``)."""

    def keys(self, action: Action) -> list[str]:
        return [c.key for c in self.components if c.action == action]

    @property
    def started(self) -> list[str]:
        return self.keys("started")

    @property
    def stopped(self) -> list[str]:
        return self.keys("stopped")

    @property
    def restarted(self) -> list[str]:
        return self.keys("restarted")

    @property
    def patched(self) -> list[str]:
        return self.keys("patched")

    @property
    def unchanged(self) -> list[str]:
        return self.keys("unchanged")

    @property
    def needs_new_replicas(self) -> list[str]:
        """The keys whose replicas ``apply_plan`` starts: restarted and started ones."""
        return [c.key for c in self.components if c.action in ("started", "restarted")]

    @property
    def empty(self) -> bool:
        """Nothing to apply: every component unchanged and routing the same."""
        return not (
            self.needs_new_replicas
            or self.patched
            or self.stopped
            or self.endpoints_added
            or self.endpoints_removed
            or self.urls_changed
            or self.timeout_changed
            or self.splits_changed
        )

    def with_restarts(self, failed_patches: dict[str, str]) -> Changes:
        """These changes after the patches in ``failed_patches`` (key -> why) fell back to
        restarts."""
        if not failed_patches:
            return self
        components = tuple(
            ComponentChange(c.key, "restarted", (f"patch failed: {failed_patches[c.key]}",))
            if c.action == "patched" and c.key in failed_patches
            else c
            for c in self.components
        )
        return replace(self, components=components)

    def reasons(self, key: str) -> tuple[str, ...]:
        for change in self.components:
            if change.key == key:
                return change.reasons
        return ()


def _reasons(
    old: ComponentSpec, new: ComponentSpec, snapshots: tuple[Snapshot, Snapshot]
) -> tuple[str, ...]:
    before, after = asdict(old), asdict(new)
    reasons: list[str] = []
    for name, value in after.items():
        if name == "url" or before.get(name) == value:
            continue
        reason = _FIELD_REASONS.get(name, name)
        if reason not in reasons:
            reasons.append(reason)
    old_modules, new_modules = snapshots[0].modules, snapshots[1].modules
    for module in new.modules:
        if module in old.modules and old_modules.get(module) != new_modules.get(module):
            reasons.append(module)
    for name in new.secrets:
        if name in old.secrets and snapshots[0].secrets.get(name) != snapshots[1].secrets.get(name):
            reasons.append(f"secret {name}")
    return tuple(reasons) or ("config",)


_PATCHABLE = frozenset({"code", "cell positions"})


def _changed(
    key: str,
    old: ComponentSpec,
    new: ComponentSpec,
    snapshots: tuple[Snapshot, Snapshot],
    patch: bool,
) -> ComponentChange:
    reasons = _reasons(old, new, snapshots)
    if not patch or not set(reasons) <= _PATCHABLE:
        return ComponentChange(key, "restarted", reasons)
    blocker = restart_reason(old, new)
    if blocker is not None:
        return ComponentChange(key, "restarted", (blocker,))
    return ComponentChange(key, "patched", ("method",) if "code" in reasons else reasons)


def analyze_changes(old: Snapshot, new: Snapshot, *, patch: bool = False) -> Changes:
    """Compare the served snapshot with a new one, component by component.

    A component restarts when its fingerprint changed (its extracted code, its config, or
    the contents of a project module it imports); a url or an A/B split change only
    re-routes. With ``patch``, a component whose code changed only in its method is
    patched instead.
    """
    old_specs, new_specs = old.specs(), new.specs()
    components: list[ComponentChange] = []
    for key, spec in new_specs.items():
        previous = old_specs.get(key)
        if previous is None:
            components.append(ComponentChange(key, "started"))
        elif old.fingerprints.get(key) != new.fingerprints.get(key):
            components.append(_changed(key, previous, spec, (old, new), patch))
        else:
            components.append(ComponentChange(key, "unchanged"))
    components += [ComponentChange(key, "stopped") for key in old_specs if key not in new_specs]
    old_endpoints, new_endpoints = old.plan.endpoints, new.plan.endpoints
    urls = tuple(
        (name, old_endpoints[name].url, spec.url)
        for name, spec in new_endpoints.items()
        if name in old_endpoints and old_endpoints[name].url != spec.url
    )
    splits = tuple(
        name
        for name, spec in new_endpoints.items()
        if name in old_endpoints and old_endpoints[name].ab != spec.ab
    )
    timeouts = (old.plan.timeout_s, new.plan.timeout_s)
    return Changes(
        components=tuple(components),
        endpoints_added=tuple(n for n in new_endpoints if n not in old_endpoints),
        endpoints_removed=tuple(n for n in old_endpoints if n not in new_endpoints),
        urls_changed=urls,
        timeout_changed=timeouts if timeouts[0] != timeouts[1] else None,
        splits_changed=splits,
    )


# --- what the loop reports ------------------------------------------------------------------


@dataclass
class PlanChange:
    """What ``apply_plan`` did, per component key (``endpoint/component``)."""

    started: list[str] = field(default_factory=list)
    """New components and components whose code or config changed (new replicas)."""
    kept: list[str] = field(default_factory=list)
    retired: list[str] = field(default_factory=list)
    """Components no longer in the plan or replaced (drained, then stopped)."""
    failed: dict[str, str] = field(default_factory=dict)
    """Changed components whose new replicas could not start, with the error: their
    previous replicas keep serving."""
    unstarted: list[str] = field(default_factory=list)
    """Components whose new replicas did not start, with no previous version serving:
    they are unhealthy (their error is shown)."""
    patched: list[str] = field(default_factory=list)
    """Components whose running replicas took the new code and kept their state."""
    patch_failed: dict[str, str] = field(default_factory=dict)
    """Components a patch was asked for that were restarted instead, with why."""
    seconds: float = 0.0
    """Spent starting new replicas (patches not included)."""
