"""Slurm's priority/multifactor factors, by the names schedd reports them under (``sprio``,
``kiln why``): one tuple both ends read, so a factor added is shown by both."""

FACTORS = ("age", "fairshare", "job_size", "partition", "qos", "assoc")
