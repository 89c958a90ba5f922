"""Isolated environments for py_environments: where they live, how they are built.

Every ``py_environment`` of a project is built as its own virtual environment (SPEC §4),
cached outside the project and shared by every project and run that needs the same set of
requirements.
"""

from peach_cli.envs.paths import cache_root, uv_cache_dir

__all__ = ["cache_root", "uv_cache_dir"]
