"""README.md's command blocks run as written, in order, against a fresh cluster.

Every ```sh block of the README is extracted and run by bash, one after the other in one shell
(so the tour's ``first=$(sbatch --parsable ...)`` variables reach its later lines), and every
command must exit 0. What the harness substitutes, and only that:

- ``KILN_HOME`` and ``PATH`` come from ``cluster.env`` (the test cluster's home and the venv
  the tests run from), so the tour's ``export PATH=$PWD/.venv/bin:$PATH`` adds nothing;
- ``kiln up`` lines are skipped: the fixture has already brought up the cluster the README asks
  for (two nodes with four fake A100s each, ``kiln up --nodes 2 --fake-gpus 4xA100``);
- the set-up block's ``bin/quickstart`` (a venv and a cluster of its own: the fixture's) and
  ``bin/test`` (this very suite) are skipped;
- the commands run in a scratch directory whose ``conf`` is the checkout's ``conf/``, so the
  tour finds ``conf/examples/*.sh`` as from the clone's root and its jobs' output files land in
  the scratch directory, not in the checkout.
"""

from __future__ import annotations

import os
import pwd
import re
import subprocess
from pathlib import Path

from tests.integration.cluster import Cluster

REPO = Path(__file__).resolve().parents[2]

# lines the harness does not run, each with why (each must still be in the README)
SKIPPED = {
    r"bin/quickstart\b": "the fixture made the venv and brought the cluster up",
    r"bin/test\b": "the test suite itself",
    r"kiln up\b": "the fixture already brought the cluster up",
}


def sh_blocks(text: str) -> list[list[str]]:
    """The README's ```sh blocks, each as its logical lines (``\\`` continuations joined)."""
    blocks = []
    for body in re.findall(r"^```sh\n(.*?)^```", text, re.S | re.M):
        lines: list[str] = []
        pending = ""
        for raw in body.splitlines():
            if raw.rstrip().endswith("\\"):
                pending += raw.rstrip()[:-1].strip() + " "
                continue
            line = (pending + raw.strip()).strip()
            pending = ""
            if line and not line.startswith("#"):
                lines.append(line)
        blocks.append(lines)
    return blocks


def _skip_reason(line: str) -> str | None:
    return next((why for pat, why in SKIPPED.items() if re.match(pat, line)), None)


def test_readme_blocks_run_as_written(two_nodes: Cluster, workdir: Path) -> None:
    blocks = sh_blocks((REPO / "README.md").read_text())
    assert len(blocks) >= 3, "the README lost its set-up, tour or admin block"
    lines = [line for block in blocks for line in block]
    for pattern in SKIPPED:
        assert any(re.match(pattern, line) for line in lines), f"no README line matches {pattern}"
    (workdir / "conf").symlink_to(REPO / "conf")
    script = ["set -o pipefail",
              "trap 'echo \"KILN-README-FAILED exit=$? command: $BASH_COMMAND\" >&2; exit 1' ERR"]
    ran = []
    for line in lines:
        why = _skip_reason(line)
        if why:
            script.append(f"echo {_quote('# skipped: ' + line + ' (' + why + ')')}")
            continue
        ran.append(line)
        script.append(f"echo {_quote('$ ' + line)}")
        script.append(line)
    assert any(line.startswith("first=$(sbatch --parsable") for line in ran)
    env = {**two_nodes.env, "USER": pwd.getpwuid(os.getuid()).pw_name}
    res = subprocess.run(["bash", "-c", "\n".join(script)], cwd=workdir, env=env,
                         capture_output=True, text=True, timeout=300)
    transcript = res.stdout + res.stderr
    assert res.returncode == 0, transcript[-6000:]
    assert "KILN-README-FAILED" not in transcript
    # what a reader of the tour sees
    assert re.search(r"JOBID\s+PARTITION\s+NAME\s+USER\s+ST", res.stdout)  # squeue
    assert "Submitted batch job" in res.stdout  # the -N 2 srun job, printed without --parsable
    assert "JobState=" in res.stdout  # scontrol show job $first
    assert "Job ID:" in res.stdout  # seff $first
    # the tour's ids were captured, not hard-coded: every job the tour submitted is in sacct
    acct = two_nodes.run("sacct", "-X", "-n", "-P", "--format", "JobID,JobName,State")
    assert acct.returncode == 0, acct.stderr
    names = {row.split("|")[1] for row in acct.stdout.splitlines()}
    assert {"wrap", "train", "eval"} <= names, acct.stdout
    # the admin block: the QOS Preempt=low names exists, and alice is in physics
    qos = two_nodes.run("sacctmgr", "-n", "-P", "show", "qos", "format=Name,Preempt")
    assert "high|low" in qos.stdout.splitlines(), qos.stdout
    assoc = two_nodes.run("sacctmgr", "-n", "-P", "show", "assoc", "user=alice",
                          "format=Account,User")
    assert "physics|alice" in assoc.stdout.splitlines(), assoc.stdout


def _quote(s: str) -> str:
    return "'" + s.replace("'", "'\\''") + "'"


def test_sh_blocks_joins_continuations() -> None:
    text = "x\n```sh\na \\\n    b\n# note\nc  # d\n```\n```python\nno\n```\n"
    assert sh_blocks(text) == [["a b", "c  # d"]]
