"""The trace simulator behind ``kiln sim``: SWF traces replayed through the real scheduler core.

``swf`` reads and filters a trace, ``machine`` models the cluster it runs on, ``policy`` maps
fcfs/easy/conservative/kiln to SchedulerConfig knobs, ``replay`` is the event loop on a virtual
clock, ``usage`` keeps fair-share usage for it, ``metrics`` turns a replay into the figures and
the CSV, ``bench`` prints the comparison table of docs/benchmarks.md.
"""
