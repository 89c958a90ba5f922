"""The replica runtime: everything a replica or a task process imports of peach.

This package is staged whole into every user environment (and uploaded to Ray), so its
contents *are* the runtime: standard library only, and nothing outside it is needed by a
worker process (``tests/test_structure.py`` keeps both true).
"""
