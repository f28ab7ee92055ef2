"""sprio against Slurm's own transcript (slurm-reference/f_share_report.txt): the same
factors from a canned schedd give the same bytes, for sprio, -l, -w and -n -l."""

from __future__ import annotations

import pytest

from cli import sprio

WEIGHTS = {"age": 1000, "assoc": 0, "fairshare": 10000, "job_size": 0, "partition": 0,
           "qos": 10000}
AGE = 0.0165  # 0.0000165 of the age weight, as in the transcript


def job(job_id: int, user: str, fairshare: float) -> dict:
    return {"job_id": job_id, "partition": "debug", "user": user, "account": "bio", "nice": 0,
            "factors": {"age": AGE, "fairshare": fairshare}}


JOBS = [job(83056, "schedbench", 3333.3333), job(83057, "schedbench", 6666.6667),
        job(83058, "root", 10000.0)]
TRANSCRIPT = {  # root# <command> -> its stdout, verbatim (trailing blanks included)
    'sprio': [
        '          JOBID PARTITION   PRIORITY       SITE        AGE  FAIRSHARE        QOS',
        '          83056 debug           3333          0          0       3333          0',
        '          83057 debug           6666          0          0       6667          0',
        '          83058 debug          10000          0          0      10000          0',
    ],
    'sprio -l': [
        '          JOBID PARTITION     USER   PRIORITY       SITE        AGE      ASSOC  FAIRSHARE    JOBSIZE  PARTITION        QOS        NICE                 TRES',
        '          83056 debug     schedben       3333          0          0          0       3333          0          0          0           0                     ',
        '          83057 debug     schedben       6666          0          0          0       6667          0          0          0           0                     ',
        '          83058 debug         root      10000          0          0          0      10000          0          0          0           0                     ',
    ],
    'sprio -w': [
        '          JOBID PARTITION   PRIORITY       SITE        AGE  FAIRSHARE        QOS',
        '        Weights                               1       1000      10000      10000',
    ],
    'sprio -n -l': [
        '          JOBID PARTITION     USER PRIORITY   AGE        ASSOC      FAIRSHARE  JOBSIZE    PARTITION  QOS        TRES                ',
        '          83056 debug     schedben 0.00000077 0.0000165  0.0000000  0.3333333  0.0000000  0.0000000  0.0000000                      ',
        '          83057 debug     schedben 0.00000155 0.0000165  0.0000000  0.6666667  0.0000000  0.0000000  0.0000000                      ',
        '          83058 debug         root 0.00000232 0.0000165  0.0000000  1.0000000  0.0000000  0.0000000  0.0000000                      ',
    ],
}


@pytest.fixture
def schedd(fake_schedd):
    def handler(op: str, body: dict) -> dict:
        assert op == "job_priority"
        jobs = [j for j in JOBS if not body.get("job_ids")
                or str(j["job_id"]) in body["job_ids"]]
        return {"weights": WEIGHTS, "jobs": jobs}
    return fake_schedd(handler)


@pytest.mark.parametrize("argv", [[], ["-l"], ["-w"], ["-n", "-l"]])
def test_the_transcripts_bytes(schedd, capsys, argv: list[str]) -> None:
    assert sprio.main(argv) == 0
    out, err = capsys.readouterr()
    assert out.splitlines() == TRANSCRIPT[" ".join(["sprio", *argv])]
    assert err == ""


def test_bad_letters_jobs_and_ids(schedd, capsys) -> None:
    assert sprio.main(["-j", "83056,83057", "-o", "%.15i %.10u %.10o %.10Y %.10A %.10F %.10Q"]) == 0
    out, err = capsys.readouterr()
    assert out.splitlines() == [
        "          JOBID       USER   PRIORITY        AGE  FAIRSHARE        QOS",
        "          83056 schedbench       3333          0       3333          0",
        "          83057 schedbench       6666          0       6667          0"]
    assert err == "sprio: error: Invalid job format specification: o\n"
    assert sprio.main(["-j", "1"]) == 0
    assert capsys.readouterr().out == "Unable to find jobs matching user/id(s) specified\n"
    assert sprio.main(["-j", "abc"]) == 1
    assert capsys.readouterr().err == "sprio: error: Invalid job id: abc\n"
