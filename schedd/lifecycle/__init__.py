"""A job's life, from its first start to its last end: the one door every run goes through.

- ``transitions``: ``start_runs``, ``request_stop``, ``cancel_pending`` and ``end_run`` with its
  judges and after-hooks, whose order is the two tuples below;
- ``preemption`` (victims, their grace and their end), ``step_cleanup`` (a run's srun steps end
  with it), ``idlegpu``: judges and hooks of their own, named below;
- ``health`` (silent nodes), ``enforcement`` (lowered limits, spent budgets, stalled stops):
  what ends runs on schedd's own initiative;
- ``admission``: a submission validated, top to bottom (``admit``);
- ``cycle``: the scheduling cycle applied (``run_cycle``: decisions, culprits set aside,
  forecasts published);
- ``planner``: the one snapshot builder, for the cycle and ``sbatch --test-only``;
- ``agents``: what schedd tells the agents (launch, signal, terminate): every message leaves
  through it.

This package never imports ``schedd.handlers``; handlers call it.
"""

from schedd.lifecycle import idlegpu, preemption, step_cleanup, transitions

# What a run's end is recorded as: each judge in turn (a judge that speaks for good sets
# ``verdict.final``; later ones leave it be).
transitions.JUDGES = (
    ("cancel", transitions.judge_cancelled),  # a cancel wins
    ("preemption", preemption.judge_preempted),  # then a preemption mark
    ("stop", transitions.judge_stopped),  # then a stop mark
    ("prolog", transitions.judge_prolog_failed),  # then a failed prolog (requeued held)
    ("node_fail", transitions.judge_node_failed),  # then a node failure's requeue
)
# What runs once the end is committed, in turn (a hook's failure is logged, the rest run).
transitions.AFTER = (
    ("steps", step_cleanup.stop_steps),  # the run's srun steps end with it
    ("agents", transitions.forget_run),  # the agent's confirmation and checkpoint
    ("epilogs", transitions.run_epilogs),  # a multi-node job's epilogs
    ("idle_gpu", idlegpu.ended),  # the run's idle GPU-seconds to the ledger
    ("preemption", preemption.release),  # a victim frees its preemptor
    ("mail", transitions.mail_ended),  # --mail-type END, FAIL, REQUEUE
)
