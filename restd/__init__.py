"""kiln restd: Slurm's REST API (slurmrestd's paths and schemas, v0.0.40 and v0.0.41).

A separate process and a client of schedd's local socket like the commands: every request is
one or more of the commands' own ops, wrapped in ``act_for`` so that schedd answers it as the
HTTP caller (schedd/restrelay.py says who may be named, and how). restd never imports schedd
(an import-linter contract) and holds no key: schedd verifies the tokens. docs/rest.md.

Modules: server (aiohttp: the listeners, the routes, the caller of each request), upstream
(act_for over cli.core.client), errors (Slurm's errors[]/warnings[] and their numbers),
schemas (the vendored OpenAPI documents: each response fitted to its published schema),
slurmctld (the /slurm/ paths), slurmdbd (the /slurmdb/ paths), submit (a job description
read into sbatch's options and checks), main (``kiln restd``).
"""
