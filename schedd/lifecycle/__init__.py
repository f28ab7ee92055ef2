"""A job's life, from its first start to its last end: the one door every run goes through.

- ``transitions``: ``start_runs``, ``request_stop``, ``cancel_pending`` and ``end_run`` with its
  ordered judges and after-hooks;
- ``preemption`` (victims, their grace and their end), ``step_cleanup`` (a run's srun steps end
  with it): hooks that register themselves with ``transitions``;
- ``health`` (silent nodes), ``enforcement`` (lowered limits, spent budgets, stalled stops):
  what ends runs on schedd's own initiative;
- ``planner``: the one snapshot builder, for the cycle and ``sbatch --test-only``;
- ``agents``: what schedd tells the agents (launch, signal, terminate).

This package never imports ``schedd.handlers``; handlers call it. Importing it registers every
hook, in order.
"""

from schedd.lifecycle import preemption, step_cleanup, transitions  # noqa: F401  (hooks)
