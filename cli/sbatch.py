"""``sbatch``: read a batch script and its options, submit it, print ``Submitted batch job N``.

Precedence is Slurm's: ``#SBATCH`` directives < ``SBATCH_*`` environment < command line. Only
options the user gave are sent (schedd fills in partition defaults), plus what only the
submitting side knows: the script, working directory, environment, submit host and command.
This module is on the hot path of every submission: standard library and the ground
modules only.
"""

import os
import sys
import time

from cli.core import Args, Command, CommandError, fail, submit_failure
from cli.core.client import Client, ClientError
from cli.submit import (
    SBATCH_TABLE,
    Settings,
    apply_options,
    build_environment,
    check_request,
    directive_tokens,
    env_options,
    ignored_warnings,
    refused_option,
    resolve_cpus_per_gpu,
)
from kiln import paths
from kiln.slurm import rlimits
from kiln.wire.protocol import (
    E_AGAIN,
    MAX_ENV_BYTES,
    MAX_SCRIPT_BYTES,
    SUBMIT_FIELDS,
    environment_bytes,
)

TYPE_CHECKING = False  # typing and collections cost every command ms to import: checkers only
if TYPE_CHECKING:
    from typing import Any

PROG = "sbatch"
WRAP_HEADER = "#!/bin/sh\n# This script was created by sbatch --wrap.\n\n"
MAX_RETRIES = 15  # Slurm's: a submission schedd cannot take now (MaxJobCount) is retried
USAGE = """Usage: sbatch [OPTIONS(0)...] [ : [OPTIONS(N)...]] script(0) [args(0)...]

Parallel run options (the common ones; every sbatch 22.05 option name is accepted):
  -a, --array=indexes         job array index values
  -A, --account=name          charge job to specified account
  -b, --begin=time            defer job until HH:MM MM/DD/YY
  -c, --cpus-per-task=ncpus   number of cpus required per task
  -d, --dependency=type:jobid[:time] defer job until condition on jobid is satisfied
  -D, --chdir=directory       set working directory for batch script
  -e, --error=err             file for batch script's standard error
      --export[=names]        specify environment variables to export
  -G, --gpus=n                count of GPUs required for the job
      --gres=list             required generic resources (gpu[:type]:N)
  -H, --hold                  submit job in held state
  -J, --job-name=jobname      name of job
      --mem=MB                minimum amount of real memory
  -n, --ntasks=ntasks         number of tasks to run
  -N, --nodes=N               number of nodes on which to run (N = min[-max])
  -o, --output=out            file for batch script's standard output
  -p, --partition=partition   partition requested
      --parsable              outputs only the jobid and cluster name (if present)
  -q, --qos=qos               quality of service
  -t, --time=minutes          time limit
      --test-only             validate batch script but do not submit
  -W, --wait                  wait for completion of submitted job
      --wrap[=command string] wrap command string in a sh script and submit
"""


def submit(args: "Args") -> int:
    cli_opts, positional = args.parsed, args.positional
    wrap = next((v for opt, v in reversed(cli_opts) if opt.dest == "wrap"), None)
    if wrap is not None and positional:
        fail("Script arguments not permitted with --wrap option")
    script, default_name, command, script_args = read_script(wrap, positional)

    tokens = directive_tokens(script, positional[0] if positional else PROG)
    lines = SBATCH.parse(tokens)  # the #SBATCH lines, by the same table
    directives = lines.parsed
    if lines.positional:
        fail(f"Invalid directive found in batch script: {lines.positional[0]}")
    settings: Settings = {"_max_array_size": paths.max_array_size()}
    environ = dict(os.environ)  # once: each read of os.environ decodes every variable again
    from_env = env_options(environ)
    apply_options(settings, directives)
    apply_options(settings, from_env)
    apply_options(settings, cli_opts)
    resolve_cpus_per_gpu(settings)
    check_request(settings, "Batch job submission failed")
    given = [*directives, *from_env, *cli_opts]
    refused = refused_option(given)
    if refused:
        fail(refused)
    if not settings.get("_quiet"):
        for warning in ignored_warnings(given):
            print(f"{PROG}: warning: {warning}", file=sys.stderr)
    job = build_job(settings, script, default_name, command, script_args, environ)
    with Client() as client:
        return _submit(client, job, settings)


SBATCH = Command(PROG, SBATCH_TABLE, submit, help=USAGE, stop_at_positional=True)
main = SBATCH.main
submit_command = SBATCH.invoke  # the command line to its exit status, errors raised


def read_script(wrap: "str | None", positional: "list[str]") -> "tuple[str, str, str, list[str]]":
    """(script text, default job name, Job.command, script arguments), checked like Slurm."""
    if wrap is not None:
        return f"{WRAP_HEADER}{wrap}\n", "wrap", "(wrap)", []
    if positional:
        path = positional[0]
        try:
            with open(path, "rb") as fh:
                data = fh.read()
        except OSError:
            fail(f"Unable to open file {path}")
        name, command = os.path.basename(path), os.path.abspath(path)
    else:
        data = sys.stdin.buffer.read()
        name, command = "sbatch", "(stdin)"
    if len(data) > MAX_SCRIPT_BYTES:  # Slurm's words; schedd would refuse it after the upload
        source = f"Script {positional[0]}" if positional else "Script from STDIN"
        fail(f"{source} is too big, read {len(data)} > {MAX_SCRIPT_BYTES} bytes.")
    check_script(data)
    return data.decode("utf-8", errors="replace"), name, command, positional[1:]


def check_script(data: bytes) -> None:
    """Slurm's sanity tests on a batch script, with its messages."""
    if not data:
        fail("Batch script is empty!")
    if not data.strip():
        fail("Batch script contains only whitespace!")
    if not data.startswith(b"#!"):
        fail("This does not look like a batch script.  The first",
             "line must start with #! followed by the path to an interpreter.",
             "For instance: #!/bin/sh")
    if b"\0" in data:
        fail("The Slurm controller does not allow scripts that",
             "contain a NULL character '\\0'.")
    if b"\r\n" in data:
        fail("Batch script contains DOS line breaks (\\r\\n)",
             "instead of expected UNIX line breaks (\\n).")


def build_job(settings: "Settings", script: str, default_name: str, command: str,
              script_args: "list[str]",
              environ: "dict[str, str] | None" = None) -> "dict[str, Any]":
    """The submit body's ``job``: options given, plus what only the submitter knows (the
    environment: ``environ``, else ``os.environ``'s)."""
    # Only the allow-listed fields go (schedd refuses any other); options kiln ignores were
    # announced with a warning and are not sent.
    job = {key: value for key, value in settings.items() if key in SUBMIT_FIELDS}
    job.setdefault("name", default_name)
    job.setdefault("workdir", os.getcwd())
    job["script"] = script
    job["command"] = command
    job["submit_host"] = os.uname().nodename
    job["environment"] = build_environment(settings.get("export", "ALL"),
                                           dict(os.environ) if environ is None else environ)
    job["environment"].update(rlimits.submitted())  # umask and soft limits, whatever --export
    size = environment_bytes(job["environment"])
    if size > MAX_ENV_BYTES:
        fail(f"Batch job submission failed: environment of {size} bytes is over the limit of "
             f"{MAX_ENV_BYTES} bytes (use --export to send less)")
    if script_args:
        job["script_args"] = script_args
    job["alloc_sid"] = os.getsid(0)
    return job


def _submit(client: "Client", job: "dict[str, Any]", settings: "Settings") -> int:
    test_only = bool(settings.get("_test_only"))
    try:
        body: dict[str, Any] = {"job": job, "test_only": test_only}
        if settings.get("_priority") is not None:
            body["priority"] = settings["_priority"]
        reply = _call_retrying(client, body)
    except ClientError as exc:
        raise CommandError(*submit_failure(exc.message, "Batch job submission failed")) from None
    job_id = reply["job_id"]
    if test_only:
        when = reply.get("start_time") or 0
        start = time.strftime("%Y-%m-%dT%H:%M:%S", time.localtime(when)) if when else "Unknown"
        print(f"{PROG}: Job {job_id} to start at {start} using {reply.get('cpus', 1)} processors"
              f" on nodes {reply.get('nodes', '')} in partition {reply.get('partition', '')}",
              file=sys.stderr)
        from cli.outlook import outlook_lines  # here: it imports cli.core.formats, ~2 ms a start

        for line in outlook_lines(reply):  # kiln's own, after Slurm's line (cli/outlook.py)
            print(f"{PROG}: {line}", file=sys.stderr)
        return 0
    print(job_id if settings.get("_parsable") else f"Submitted batch job {job_id}", flush=True)
    if settings.get("_wait"):
        return wait_for(client, job_id)
    return 0


def _call_retrying(client: "Client", body: "dict[str, Any]") -> "dict[str, Any]":
    """Submit; a refusal that may pass later (MaxJobCount: EAGAIN) is retried as Slurm's
    sbatch does, after 1, 2, ... MAX_RETRIES seconds, saying so once."""
    retries = 0
    while True:
        try:
            return client.call("submit", body)
        except ClientError as exc:
            # --test-only's E_AGAIN is schedd's forecast queue, full: said at once, not retried
            if exc.code != E_AGAIN or retries >= MAX_RETRIES or body.get("test_only"):
                raise
        if not retries:
            print(f"{PROG}: error: Slurm temporarily unable to accept job, sleeping and "
                  "retrying", file=sys.stderr, flush=True)
        retries += 1
        time.sleep(retries)


def wait_for(client: "Client", job_id: int, poll: float = 0.5, max_poll: float = 2.0) -> int:
    """-W/--wait: poll until every task of the job has finished; the worst exit status, with
    Slurm's rule: a normal exit gives its code, a signal gives 1."""
    finished = {"COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "NODE_FAIL", "OUT_OF_MEMORY",
                "PREEMPTED"}
    while True:
        time.sleep(poll)
        poll = min(poll * 2, max_poll)
        try:
            jobs = client.call("query_jobs", {"job_ids": [str(job_id)], "all_states": True})["jobs"]
        except ClientError as exc:
            if exc.code == "invalid_job_id":
                print(f"{PROG}: error: Job {job_id} no longer found and exit code not found",
                      file=sys.stderr)
                return 0
            print(f"{PROG}: error: Currently unable to load job state information, retrying: "
                  f"{exc.message}", file=sys.stderr)
            continue
        if not jobs:
            print(f"{PROG}: error: Job {job_id} no longer found and exit code not found",
                  file=sys.stderr)
            return 0
        if all(j["state"] in finished for j in jobs):
            return max(1 if j.get("exit_signal") else int(j.get("exit_code") or 0) for j in jobs)


if __name__ == "__main__":
    sys.exit(main())
