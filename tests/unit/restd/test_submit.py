"""restd/submit.py: a job description read as sbatch reads the same request."""

from __future__ import annotations

import pytest

from restd import submit
from restd.errors import RestError

SCRIPT = "#!/bin/sh\ntrue\n"


def build(job: dict, script: str = SCRIPT) -> tuple[dict, list[str]]:
    return submit.build({"job": job, "script": script}, "v0.0.40", "root", "host", 1001)


def test_fields_become_sbatchs_options() -> None:
    job, warnings = build({
        "name": "n", "partition": "gpu", "time_limit": {"set": True, "number": 5},
        "tasks": 4, "cpus_per_task": 2, "memory_per_node": {"set": True, "number": 1024},
        "tres_per_node": "gres/gpu:2", "environment": ["A=1", "B=x=y"], "hold": True,
        "current_working_directory": "/w", "argv": ["s", "one"], "comment": "c",
        "requeue": False, "mail_type": ["END"]})
    assert job["name"] == "n" and job["partition"] == "gpu"
    assert job["time_limit"] == 300 and job["num_tasks"] == 4 and job["cpus_per_task"] == 2
    assert job["mem_per_node_mb"] == 1024 and job["gpus_per_node"] == 2
    assert job["environment"] == {"A": "1", "B": "x=y"} and job["held"] == "user"
    assert job["workdir"] == "/w" and job["script_args"] == ["one"]
    assert job["requeue"] is False and warnings == []


def test_directives_count_and_the_body_wins() -> None:
    job, _ = build({"time_limit": 9}, "#!/bin/sh\n#SBATCH -J fromscript\n#SBATCH -t 3\n")
    assert job["name"] == "fromscript" and job["time_limit"] == 540


def test_unlimited_and_unset_numbers() -> None:
    job, _ = build({"time_limit": {"set": True, "infinite": True, "number": 0},
                    "nice": {"set": False, "number": 0}})
    assert job["time_limit"] is None and "nice" not in job


def test_fields_kiln_ignores_are_warned_about() -> None:
    _, warnings = build({"x11": ["BATCH_NODE"], "reboot": False})
    assert warnings == ["job_desc_msg field x11 is not supported by kiln: ignored"]


@pytest.mark.parametrize("body,words", [
    ({"job": {}, "script": "no shebang\n"}, "This does not look like a batch script."),
    ({"job": {"tasks": "x"}, "script": SCRIPT}, 'Invalid numeric value "x" for --ntasks.'),
    ({"job": {"nosuch": 1}, "script": SCRIPT}, "Unknown field 'nosuch' of job_desc_msg"),
    ({"job": {}}, "Batch job script not specified"),
    ({"job": {}, "jobs": [{}], "script": SCRIPT}, "never both"),
    ({"jobs": [{}, {}], "script": SCRIPT}, "heterogeneous jobs are not supported"),
    ({"job": {"environment": "A=1"}, "script": SCRIPT}, "expected a list of NAME=value"),
    ({"job": {"environment": ["A"]}, "script": SCRIPT}, "expected NAME=value"),
    ({"job": {"tres_per_job": "gres/fpga:1"}, "script": SCRIPT}, "only gres/gpu"),
    ({"job": {"name": {"a": 1}}, "script": SCRIPT}, "Failure parsing field name"),
    ([], "must be a JSON object"),
])
def test_bad_descriptions_say_why(body: object, words: str) -> None:
    with pytest.raises(RestError, match=None) as err:
        submit.build(body, "v0.0.40", "root", "host", 1001)
    assert words in err.value.description
    assert 400 <= err.value.status < 500
