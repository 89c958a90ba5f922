"""The examples in the code's docstrings are run: each module that has one (``>>>``) is a
test, so an example that stops being true (the A/B formula's buckets in
``peach_cli/runtime/contract/ab.py``, a Host value's parsing in
``simulator/local_service.py``) fails the suite instead of misleading its reader."""

from __future__ import annotations

import doctest
import importlib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("peach_cli", "simulator")


def modules_with_examples() -> list[str]:
    names = []
    for package in PACKAGES:
        for path in sorted((ROOT / package).rglob("*.py")):
            if ">>>" in path.read_text(encoding="utf-8"):
                parts = list(path.relative_to(ROOT).with_suffix("").parts)
                if parts[-1] == "__init__":
                    parts.pop()
                names.append(".".join(parts))
    return names


MODULES = modules_with_examples()


def test_the_modules_whose_examples_are_run_include_the_ab_formula():
    assert "peach_cli.runtime.contract.ab" in MODULES
    assert "simulator.local_service" in MODULES


@pytest.mark.parametrize("name", MODULES)
def test_the_examples_in_a_modules_docstrings_hold(name):
    module = importlib.import_module(name)
    failed, attempted = doctest.testmod(module, optionflags=doctest.ELLIPSIS)
    assert attempted > 0, f"{name} has no example doctest can find"
    assert failed == 0, f"{failed} of {attempted} examples in {name} fail (see above)"
