"""scancel: id spellings, filters, signals and Slurm's error lines."""

from __future__ import annotations

import getpass
from typing import Any

import pytest

from cli import scancel


@pytest.fixture
def cancels(fake_schedd):
    errors: list[dict[str, Any]] = []

    def handler(op: str, body: dict[str, Any]) -> dict[str, Any]:
        assert op == "cancel"
        return {"cancelled": body.get("job_ids", []), "errors": list(errors)}

    fake = fake_schedd(handler)
    fake.errors = errors  # type: ignore[attr-defined]
    return fake


def test_ids_and_filters(cancels, capsys) -> None:
    assert scancel.main(["123", "124_4,125_[1-5]", "126.batch"]) == 0
    assert cancels.ops("cancel")[-1] == {"job_ids": ["123", "124_4", "125_[1-5]", "126"]}
    assert scancel.main(["-u", "bob", "-t", "PD", "-p", "gpu", "-A", "phys", "-n", "x",
                         "-q", "low", "--signal=SIGUSR1", "-b", "-f"]) == 0
    assert cancels.ops("cancel")[-1] == {
        "users": ["bob"], "states": ["PENDING"], "partitions": ["gpu"], "accounts": ["phys"],
        "names": ["x"], "qos": ["low"], "signal": "USR1", "batch_only": True, "full": True}
    assert scancel.main(["--me"]) == 0
    assert cancels.ops("cancel")[-1] == {"users": [getpass.getuser()]}
    assert capsys.readouterr().err == ""


def test_kill_errors_are_slurms_lines(cancels, capsys) -> None:
    cancels.errors.append({"job_id": "99", "message": "Invalid job id specified"})
    assert scancel.main(["99"]) == 1
    assert capsys.readouterr().err == (
        "scancel: error: Kill job error on job id 99: Invalid job id specified\n")
    assert scancel.main(["-Q", "99"]) == 0
    assert capsys.readouterr().err == ""


@pytest.mark.parametrize("argv, line", [
    ([], "scancel: error: No job identification provided"),
    (["-s", "USR1"], "scancel: error: No job identification provided"),
    (["abc"], "scancel: error: Invalid job id abc"),
    (["-s", "NOPE", "1"], "scancel: error: Invalid job signal: NOPE"),
    (["--frob", "1"], "scancel: unrecognized option '--frob'"),
    (["-t", "ZZ"], "scancel: error: Invalid job state specified: ZZ"),
])
def test_bad_input(cancels, capsys, argv, line) -> None:
    assert scancel.main(argv) == 1
    assert capsys.readouterr().err == line + "\n"
    assert cancels.ops("cancel") == []
