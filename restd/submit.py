"""``POST /slurm/v0.0.4x/job/submit``: a job description (``job_desc_msg``) read as sbatch
would read the same request, so it passes sbatch's checks with sbatch's messages.

Each field kiln takes becomes the sbatch option that sets it (``name`` -> ``--job-name``,
``time_limit`` -> ``--time``, ...) and the script's ``#SBATCH`` lines are read too, the body's
fields winning as a command line wins over directives; then ``cli.submit``'s table, value
parsers and request checks and ``cli.sbatch.check_script`` do what they do for sbatch. What
only the submitter knows comes from the body: ``environment`` (a list of ``NAME=value``),
``current_working_directory`` (else the user's home), ``argv``. A field of the schema kiln does
not act on is named in ``warnings[]``; a field the schema does not have, or a value of the
wrong type, refuses the whole body (400, nothing submitted)."""

from __future__ import annotations

import os
import pwd
import time
from typing import Any

from cli.core import CommandError
from cli.core.options import OptionError
from cli.sbatch import SBATCH, check_script
from cli.submit import (
    Settings,
    apply_options,
    check_request,
    directive_tokens,
    refused_option,
    resolve_cpus_per_gpu,
)
from kiln.wire.protocol import MAX_ENV_BYTES, MAX_SCRIPT_BYTES, SUBMIT_FIELDS, environment_bytes
from restd import schemas
from restd.errors import (
    ESLURM_REST_FAIL_PARSING,
    ESLURM_REST_INVALID_JOBS_DESC,
    ESLURM_REST_INVALID_QUERY,
    SLURM_ERROR,
    RestError,
)

LEAD = "Batch job submission failed"

# job_desc_msg field -> sbatch's long option (a string, an integer or a flagged number)
OPTIONS = {
    "name": "job-name", "partition": "partition", "account": "account", "qos": "qos",
    "comment": "comment", "time_limit": "time", "time_minimum": "time-min",
    "tasks": "ntasks", "cpus_per_task": "cpus-per-task", "tasks_per_node": "ntasks-per-node",
    "memory_per_node": "mem", "memory_per_cpu": "mem-per-cpu", "standard_output": "output",
    "standard_error": "error", "standard_input": "input", "dependency": "dependency",
    "array": "array", "nice": "nice", "mail_user": "mail-user", "licenses": "licenses",
    "reservation": "reservation", "excluded_nodes": "exclude", "constraints": "constraint",
    "wckey": "wckey", "priority": "priority", "open_mode": "open-mode",
    "current_working_directory": "chdir", "nodes": "nodes", "required_nodes": "nodelist",
}
TRES = {"tres_per_job": "gpus", "tres_per_node": "gpus-per-node", "tres_per_task": "gpus-per-task"}
# taken from the body but not as an option
OWN = {"script", "environment", "argv", "hold", "requeue", "exclusive", "mail_type",
       "minimum_nodes", "maximum_nodes", "begin_time", "memory_per_tres", *TRES}


def _value(field: str, value: Any) -> Any:
    """A flagged number ({set, infinite, number}) or a plain one; None when unset."""
    if isinstance(value, dict) and {"set", "number"} <= set(value):
        if value.get("infinite"):
            return "UNLIMITED" if field in ("time_limit", "time_minimum") else None
        return value["number"] if value.get("set") else None
    return value


def _text(field: str, value: Any) -> str:
    value = _value(field, value)
    if isinstance(value, bool) or not isinstance(value, (str, int, float)):
        raise RestError(ESLURM_REST_FAIL_PARSING,
                        f"Rejecting request. Failure parsing field {field}: expected a "
                        f"string or a number, not {type(value).__name__}", "job/submit")
    return str(value)


def _gpus(field: str, value: Any) -> str:
    """``gres/gpu:2`` or ``gres/gpu:h100:2`` -> ``2`` / ``h100:2`` (sbatch's --gpus forms)."""
    text = _text(field, value)
    for part in text.split(","):
        name = part.removeprefix("gres/").removeprefix("gres:")
        if name.startswith("gpu:") or name.startswith("gpu="):
            return name[4:]
        if name == "gpu":
            return "1"
    raise RestError(ESLURM_REST_INVALID_JOBS_DESC,
                    f"{field}={text}: only gres/gpu is configured", "job/submit")


def option_words(job: dict[str, Any]) -> tuple[list[str], list[str]]:
    """The sbatch words a description's fields stand for, and the warnings for fields of the
    schema kiln does not act on."""
    words: list[str] = []
    warnings: list[str] = []
    for field, value in job.items():
        if field in OPTIONS:
            if _value(field, value) is None or value == "":
                continue
            if field == "required_nodes" and isinstance(value, list):
                value = ",".join(map(str, value))
            if field in ("time_limit", "time_minimum") and isinstance(_value(field, value), int):
                value = str(_value(field, value))  # minutes, as sbatch's -t N
            words.append(f"--{OPTIONS[field]}={_text(field, value)}")
        elif field in TRES:
            if value:
                words.append(f"--{TRES[field]}={_gpus(field, value)}")
        elif field == "memory_per_tres":
            if value:
                words.append(f"--mem-per-gpu={_gpus(field, value)}")
        elif field == "hold":
            if value is True:
                words.append("--hold")
        elif field == "requeue":
            if isinstance(value, bool):
                words.append("--requeue" if value else "--no-requeue")
        elif field == "exclusive":
            if value and value != ["false"] and value is not False:
                words.append("--exclusive")
        elif field == "mail_type":
            if value:
                kinds = value if isinstance(value, list) else [value]
                words.append("--mail-type=" + ",".join(map(str, kinds)))
        elif field in ("minimum_nodes", "maximum_nodes"):
            continue  # with the other, below
        elif field == "begin_time":
            when = _value(field, value)
            if when:
                words.append("--begin=" + time.strftime("%Y-%m-%dT%H:%M:%S",
                                                        time.localtime(int(when))))
        elif field not in OWN and value not in (None, "", [], {}, False, 0):
            warnings.append(f"job_desc_msg field {field} is not supported by kiln: ignored")
    low, high = _value("minimum_nodes", job.get("minimum_nodes")), \
        _value("maximum_nodes", job.get("maximum_nodes"))
    if low and "nodes" not in job:
        words.append(f"--nodes={low}-{high}" if high else f"--nodes={low}")
    return words, warnings


def _environment(job: dict[str, Any]) -> dict[str, str]:
    env = job.get("environment")
    if env is None:
        return {}
    if isinstance(env, dict):
        items = [f"{k}={v}" for k, v in env.items()]
    elif isinstance(env, list):
        items = env
    else:
        raise RestError(ESLURM_REST_FAIL_PARSING, "Rejecting request. Failure parsing field "
                        "environment: expected a list of NAME=value", "job/submit")
    out: dict[str, str] = {}
    for item in items:
        if not isinstance(item, str) or "=" not in item:
            raise RestError(ESLURM_REST_FAIL_PARSING, f"Rejecting request. Failure parsing "
                            f"environment entry {item!r}: expected NAME=value", "job/submit")
        name, _, value = item.partition("=")
        out[name] = value
    return out


def read_body(body: Any, version: str) -> tuple[dict[str, Any], str, list[str]]:
    """(the description, the script, warnings) of a submission body, or RestError."""
    if not isinstance(body, dict):
        raise RestError(ESLURM_REST_INVALID_JOBS_DESC, "Rejecting request. The body must be "
                        "a JSON object with \"job\" (or \"jobs\") and \"script\"", "job/submit")
    unknown = sorted(set(body) - {"job", "jobs", "script"})
    if unknown:
        raise RestError(ESLURM_REST_FAIL_PARSING, f"Rejecting request. Unknown field "
                        f"{unknown[0]!r} in the submission", "job/submit")
    if "job" in body and "jobs" in body:
        raise RestError(ESLURM_REST_INVALID_QUERY, "Specify only one \"job\" or \"jobs\" "
                        "fields but never both", "job/submit")
    job = body.get("job")
    if job is None and "jobs" in body:
        jobs = body["jobs"]
        if not isinstance(jobs, list) or len(jobs) != 1:
            raise RestError(ESLURM_REST_INVALID_JOBS_DESC, "heterogeneous jobs are not "
                            "supported by kiln: \"jobs\" must hold exactly one job",
                            "job/submit")
        job = jobs[0]
    if job is None:
        raise RestError(ESLURM_REST_INVALID_QUERY, "Specifing either \"job\" or \"jobs\" "
                        "fields are required to submit job", "job/submit")
    if not isinstance(job, dict):
        raise RestError(ESLURM_REST_INVALID_JOBS_DESC, "Rejecting request. \"job\" must be "
                        "an object (job_desc_msg)", "job/submit")
    known = schemas.schema(version, "job_desc_msg").get("properties") or {}
    strange = sorted(set(job) - set(known))
    if strange:
        raise RestError(ESLURM_REST_FAIL_PARSING, f"Rejecting request. Unknown field "
                        f"{strange[0]!r} of job_desc_msg", "job/submit")
    script = body.get("script") if body.get("script") is not None else job.get("script")
    if not isinstance(script, str):
        raise RestError(ESLURM_REST_INVALID_JOBS_DESC, "Batch job script not specified "
                        "(\"script\")", "job/submit")
    return job, script, []


def build(body: Any, version: str, user: str, submit_host: str,
          max_array_size: int) -> tuple[dict[str, Any], list[str]]:
    """The submit op's ``job`` and the warnings, or RestError with sbatch's message."""
    job, script, warnings = read_body(body, version)
    data = script.encode("utf-8", "surrogateescape")
    try:
        if len(data) > MAX_SCRIPT_BYTES:
            raise CommandError(f"Script is too big, read {len(data)} > {MAX_SCRIPT_BYTES} "
                               "bytes.")
        check_script(data)
        words, ignored = option_words(job)
        warnings += ignored
        given = SBATCH.parse(words)
        if given.positional:
            raise CommandError(f"Invalid value: {given.positional[0]}")
        lines = SBATCH.parse(directive_tokens(script, "job/submit"))
        if lines.positional:
            raise CommandError(f"Invalid directive found in batch script: "
                               f"{lines.positional[0]}")
        settings: Settings = {"_max_array_size": max_array_size}
        apply_options(settings, lines.parsed)
        apply_options(settings, given.parsed)
        resolve_cpus_per_gpu(settings)
        check_request(settings, LEAD)
        refused = refused_option([*lines.parsed, *given.parsed])
        if refused:
            raise CommandError(refused)
    except CommandError as exc:
        raise RestError(SLURM_ERROR, "\n".join(exc.lines) or str(exc), "job/submit",
                        400) from None
    except OptionError as exc:
        raise RestError(SLURM_ERROR, exc.message, "job/submit", 400) from None
    out = {key: value for key, value in settings.items() if key in SUBMIT_FIELDS}
    out.setdefault("name", "")
    if "workdir" not in out:
        try:
            out["workdir"] = pwd.getpwnam(user).pw_dir
        except KeyError:
            out["workdir"] = "/"
    out["script"] = script
    out["command"] = "(rest)"
    out["submit_host"] = submit_host
    out["environment"] = _environment(job)
    size = environment_bytes(out["environment"])
    if size > MAX_ENV_BYTES:
        raise RestError(SLURM_ERROR, f"{LEAD}: environment of {size} bytes is over the limit "
                        f"of {MAX_ENV_BYTES} bytes", "job/submit", 400)
    argv = job.get("argv")
    if isinstance(argv, list) and len(argv) > 1:
        out["script_args"] = [str(a) for a in argv[1:]]
    if settings.get("_priority") is not None:
        out["_priority"] = settings["_priority"]
    return out, warnings


def submit_body(job: dict[str, Any]) -> dict[str, Any]:
    priority = job.pop("_priority", None)
    body: dict[str, Any] = {"job": job}
    if priority is not None:
        body["priority"] = priority
    return body


def hostname() -> str:
    return os.uname().nodename
