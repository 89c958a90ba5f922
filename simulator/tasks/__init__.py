"""Tasks under `peach dev` and `peach task run`, peach's side of the task process.

``scheduler`` (when a task runs: triggers, schedules, one run at a time), ``run`` (one run:
starting the task process, following its output, killing its tree) and ``events`` (what the
views are told). The task process's own side is ``peach_cli.runtime.task_worker``.
"""
