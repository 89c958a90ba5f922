"""What component replicas on Ray report about themselves, and the gateway's health answer.

A replica cannot be addressed on its own through a Serve handle, so each one writes a
small record — its last error (a failed drift re-init) — to the cluster's key-value store
under ``<app>/<deployment>/<replica>`` (namespace ``peach``). The gateway reads them to
answer ``GET /_peach/health`` as ``peach dev`` does, and ``peach status`` reads that answer.

Runs on the cluster: the standard library here, Ray imported inside the functions.
"""

from __future__ import annotations

import json
import logging
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from peach_cli.runtime.plan import ComponentSpec

NAMESPACE = "peach"
logger = logging.getLogger("ray.serve")
"""Serve's logger: its lines reach the replica's log file and stderr (``peach logs``)."""


def _key(app: str, deployment: str, replica: str) -> bytes:
    return f"{app}/{deployment}/{replica}".encode()


def publish(app: str, deployment: str, replica: str, record: dict[str, Any]) -> None:
    """Store ``record`` for one replica (best effort: a report never fails a request)."""
    from ray.experimental import internal_kv

    try:
        internal_kv._internal_kv_put(
            _key(app, deployment, replica),
            json.dumps(record).encode(),
            overwrite=True,
            namespace=NAMESPACE,
        )
    except Exception as error:  # the GCS is busy or restarting
        logger.warning("cannot store the status of %s: %s", replica, error)


def remove(app: str, deployment: str, replica: str) -> None:
    from ray.experimental import internal_kv

    try:
        internal_kv._internal_kv_del(_key(app, deployment, replica), namespace=NAMESPACE)
    except Exception:  # the cluster is shutting down
        pass


def read(app: str) -> dict[tuple[str, str], dict[str, Any]]:
    """(deployment, replica) → record, for every replica of ``app`` that reported."""
    from ray.experimental import internal_kv

    records: dict[tuple[str, str], dict[str, Any]] = {}
    prefix = f"{app}/".encode()
    for key in internal_kv._internal_kv_list(prefix, namespace=NAMESPACE) or []:
        value = internal_kv._internal_kv_get(key, namespace=NAMESPACE)
        parts = key.decode(errors="replace")[len(prefix) :].split("/")
        if value is None or len(parts) != 2:
            continue
        try:
            records[(parts[0], parts[1])] = json.loads(value)
        except ValueError:
            continue
    return records


def _text(value: Any) -> str:
    """An enum member (as Serve's details hold them) or a string, as text."""
    return str(getattr(value, "value", value))


def health_body(
    codops: str,
    components: dict[str, ComponentSpec],
    deployments: dict[str, Any],
    records: dict[tuple[str, str], dict[str, Any]],
    unstartable: dict[str, str],
) -> dict[str, Any]:
    """The ``/_peach/health`` answer, in the shape ``peach dev`` gives it
    (``contract.status``).

    ``components``: deployment → its component; ``deployments``: Serve's details of the
    application's deployments; ``unstartable``: deployment → the init error of a component
    none of whose replicas can start.
    """
    from peach_cli.runtime.contract.status import component_health, health_body, replica_health

    items = []
    starting = False
    healthy = True
    for deployment, spec in sorted(components.items(), key=lambda item: item[1].key):
        details = deployments.get(deployment) or {}
        init_error = unstartable.get(deployment)
        replicas = []
        for replica in details.get("replicas") or []:
            unique = _text(replica.get("replica_id", "?"))
            state = _text(replica.get("state", "?"))
            record = records.get((deployment, unique)) or {}
            error = record.get("error") or (init_error if state != "RUNNING" else None)
            if state in ("STARTING", "PENDING_MIGRATION"):
                starting = True
            if state != "RUNNING" or error:
                healthy = False
            replicas.append(
                replica_health(
                    f"{spec.key}#{unique}",
                    state.lower(),
                    replica.get("pid"),
                    error,
                    replica_id=unique,
                    node_ip=replica.get("node_ip"),
                )
            )
        if init_error or _text(details.get("status", "")) != "HEALTHY":
            healthy = False
        if not replicas and not init_error:
            starting = True
        items.append(component_health(spec, deployment, replicas, init_error))
    return health_body(codops, items, host="ray", starting=starting, healthy=healthy)
