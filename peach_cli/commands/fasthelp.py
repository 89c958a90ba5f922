"""Keep `peach --help` fast: defer two imports that typer's help renderer never uses here.

``typer.rich_utils`` (imported to render help and usage errors) imports ``rich.markdown``
and ``rich.traceback`` at module level, which pull in markdown-it and pygments: about 0.1 s,
a third of `peach --help`. peach renders neither Markdown help (markup mode is "rich") nor
pretty tracebacks (they are off), so while ``typer.rich_utils`` itself is being imported
those two modules are stand-ins whose classes import the real module on first use. The
stand-ins leave ``sys.modules`` as soon as that import ends: no other code ever sees them.
Measured by ``benchmarks/cli_startup.py``.
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.util
import sys
import types
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any

_TARGET = "typer.rich_utils"
_DEFERRED = {"rich.markdown": "Markdown", "rich.traceback": "Traceback"}


def _stand_in(module: str, name: str) -> type:
    """A class that builds the real ``module.name`` (importing it) when it is used."""

    def real() -> Any:
        return getattr(importlib.import_module(module), name)

    class StandIn:
        def __new__(cls, *args: Any, **kwargs: Any) -> Any:
            return real()(*args, **kwargs)

        @classmethod
        def from_exception(cls, *args: Any, **kwargs: Any) -> Any:
            return real().from_exception(*args, **kwargs)

    StandIn.__name__ = StandIn.__qualname__ = name
    return StandIn


@contextmanager
def _stand_ins() -> Iterator[None]:
    installed = {}
    for module, name in _DEFERRED.items():
        if module not in sys.modules:
            stub = types.ModuleType(module)
            setattr(stub, name, _stand_in(module, name))
            sys.modules[module] = installed[module] = stub
    try:
        yield
    finally:
        for module, stub in installed.items():
            if sys.modules.get(module) is stub:
                del sys.modules[module]


class _Finder(importlib.abc.MetaPathFinder):
    """Finds ``typer.rich_utils`` once, with a loader that runs it among the stand-ins."""

    def find_spec(
        self, fullname: str, path: Sequence[str] | None, target: types.ModuleType | None = None
    ) -> importlib.machinery.ModuleSpec | None:
        if fullname != _TARGET:
            return None
        sys.meta_path.remove(self)
        spec = importlib.util.find_spec(fullname)
        loader = spec.loader if spec is not None else None
        if loader is None or not hasattr(loader, "exec_module"):
            return spec
        exec_module = loader.exec_module

        def exec_among_stand_ins(module: types.ModuleType) -> None:
            with _stand_ins():
                exec_module(module)

        loader.exec_module = exec_among_stand_ins  # type: ignore[method-assign]
        return spec


def install() -> None:
    """Defer the heavy imports of ``typer.rich_utils`` (no-op once it is imported)."""
    if _TARGET not in sys.modules and not any(isinstance(f, _Finder) for f in sys.meta_path):
        sys.meta_path.insert(0, _Finder())
