"""The user and admin commands. Fast path: the standard library only until a reply is printed.

The modules sbatch's start loads (tests/unit/cli/test_command_imports.py lists and guards them)
write annotations as strings rather than through ``from __future__ import annotations``:
importing ``__future__`` costs every command ~0.1 ms of CPU (docs/benchmarks.md, issue 13)."""
