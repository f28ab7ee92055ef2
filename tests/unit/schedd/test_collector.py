"""schedd/collector.py: full collections of the cyclic GC scan only what is new (issue 12's
bystander: a full collection beside a long sacct held the loop 200-600 ms)."""

from __future__ import annotations

import gc

from schedd.collector import Collector


def test_survivors_are_frozen_after_a_full_collection_and_handed_back_once_a_period() -> None:
    gc.unfreeze()
    collector = Collector(now=0.0, unfreeze_every=600.0)
    try:
        collector.tick(1.0)
        assert gc.get_freeze_count() == 0  # not started (a Daemon built by a test)
        collector.start()
        frozen = gc.get_freeze_count()
        assert frozen > 0  # start-up's objects
        kept = [[n] for n in range(1000)]  # new long-lived containers
        collector.tick(2.0)
        assert gc.get_freeze_count() == frozen  # no full collection yet: nothing to freeze
        gc.collect()  # a full collection: its survivors are frozen at the next tick
        collector.tick(3.0)
        assert gc.get_freeze_count() >= frozen + len(kept)
        collector.tick(600.0)  # the period is over: all of it back to the collector
        assert gc.get_freeze_count() == 0
        gc.collect()
        collector.tick(601.0)  # and the freezing starts again
        assert gc.get_freeze_count() > 0
    finally:
        collector.close()
        gc.unfreeze()
    assert collector._collected not in gc.callbacks
