"""schedd: kiln's controller. This package's ``__init__``, ``protocol``, ``config``, ``model`` and
``slurm`` import only the standard library: the CLI and the agent import them."""
