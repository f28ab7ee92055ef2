"""kiln: the ground every tier stands on — the daemon (``schedd``), the node agent (``agentd``)
and the commands (``cli``) all import it, and it imports none of them.

What lives here is what two or more tiers must agree on: the wire (``wire/``: the envelope, the
operations table, the JSON codec, the local socket), Slurm's vocabulary (``slurm/``: hostlists,
states, signals, TRES, gres, time and text formats), the data model, kiln.toml (``config``),
file locations (``paths``), callers' identity, CURVE keys, logging and what a reload may change
(``reconfig``). The standard library is its only dependency, bar pyzmq in ``keys`` (which the
commands' fast path never imports): a command's cost stays Python's start plus its own work.
"""
