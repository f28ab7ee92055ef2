"""The pure scheduler core: ``cycle.schedule(Snapshot, SchedulerConfig) -> Decisions``."""
