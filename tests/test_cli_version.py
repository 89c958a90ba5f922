"""`peach --version` and `-V` print `peach X.Y.Z` (the package's version) and exit 0."""

from __future__ import annotations

import tomllib

import pytest
from cli_support import REPO, run_peach


@pytest.mark.parametrize("flag", ["--version", "-V"])
def test_version_prints_the_package_version(flag):
    version = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["version"]
    result = run_peach(flag)
    assert result.returncode == 0, result.stderr
    assert result.stdout == f"peach {version}\n"
    assert result.stderr == ""
