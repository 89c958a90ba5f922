"""Endpoint tests and replay (SPEC §8): case files, the runner, the host it runs against."""
