"""Multi-node jobs and srun through the real commands: sbatch -> schedd -> every node's agent."""

from __future__ import annotations

import subprocess
import time
from pathlib import Path

from schedd.ledger.store import Store
from tests.integration.cluster import Cluster

FINISHED = {"COMPLETED", "FAILED", "CANCELLED", "TIMEOUT"}
PRINT_ENV = ("echo PROCID=$SLURM_PROCID NODEID=$SLURM_NODEID LOCALID=$SLURM_LOCALID "
             "STEP=$SLURM_STEP_ID NTASKS=$SLURM_NTASKS HOST=$SLURMD_NODENAME "
             "GPUS=$CUDA_VISIBLE_DEVICES")


def _fields(line: str) -> dict[str, str]:
    return dict(item.split("=", 1) for item in line.split())


def _steps(cluster: Cluster, job_id: int) -> dict[str, tuple[str, int, int, str]]:
    store = Store(cluster.db_url)
    try:
        return {r.step_id: (r.state, r.exit_code, r.num_tasks, r.node_list)
                for r in store.query_steps([job_id])}
    finally:
        store.close()


def test_two_nodes_two_tasks_each_print_their_env(two_nodes: Cluster, workdir: Path) -> None:
    script = workdir / "env.sh"
    script.write_text(f"#!/bin/bash\nsrun bash -c '{PRINT_ENV}'\n")
    job_id = two_nodes.sbatch("-N", "2", "--ntasks-per-node", "2", "--gpus-per-node", "4",
                              str(script), cwd=workdir)
    job = two_nodes.wait(job_id, FINISHED)
    assert job["state"] == "COMPLETED", (workdir / f"slurm-{job_id}.out").read_text()
    assert job["node_list"] == "node[1-2]"
    lines = (workdir / f"slurm-{job_id}.out").read_text().splitlines()
    assert len(lines) == 4, lines
    tasks = sorted((_fields(line) for line in lines), key=lambda f: int(f["PROCID"]))
    assert [t["PROCID"] for t in tasks] == ["0", "1", "2", "3"]
    assert [t["NODEID"] for t in tasks] == ["0", "0", "1", "1"]
    assert [t["LOCALID"] for t in tasks] == ["0", "1", "0", "1"]
    assert [t["HOST"] for t in tasks] == ["node1", "node1", "node2", "node2"]
    assert {t["STEP"] for t in tasks} == {"0"} and {t["NTASKS"] for t in tasks} == {"4"}
    assert {t["GPUS"] for t in tasks} == {"0,1,2,3"}
    assert _steps(two_nodes, job_id) == {"batch": ("COMPLETED", 0, 1, "node1"),
                                         "0": ("COMPLETED", 0, 4, "node[1-2]")}


def test_per_task_output_files_and_labels(two_nodes: Cluster, workdir: Path) -> None:
    script = workdir / "files.sh"
    script.write_text("#!/bin/bash\n"
                      "srun -n 2 --output out_%j_%t.txt hostname\n"
                      "srun -l -n 2 --cpu-bind=q --unbuffered echo hi\n")
    job_id = two_nodes.sbatch(str(script), cwd=workdir)
    job = two_nodes.wait(job_id, FINISHED)
    assert job["state"] == "COMPLETED"
    files = sorted(p.name for p in workdir.glob(f"out_{job_id}_*.txt"))
    assert files == [f"out_{job_id}_0.txt", f"out_{job_id}_1.txt"]
    assert all((workdir / f).read_text().strip() for f in files)
    labelled = sorted((workdir / f"slurm-{job_id}.out").read_text().splitlines())
    assert labelled == ["0: hi", "1: hi"]
    assert set(_steps(two_nodes, job_id)) == {"batch", "0", "1"}


def test_srun_exits_with_the_worst_task_status(two_nodes: Cluster, workdir: Path) -> None:
    script = workdir / "worst.sh"
    script.write_text("#!/bin/bash\nsrun bash -c 'exit $SLURM_PROCID'\necho rc=$?\n")
    job_id = two_nodes.sbatch("-N", "2", "--ntasks-per-node", "2", str(script), cwd=workdir)
    assert two_nodes.wait(job_id, FINISHED)["state"] == "COMPLETED"
    out = (workdir / f"slurm-{job_id}.out").read_text().splitlines()
    assert out[-1] == "rc=3"
    assert "srun: error: node2: task 3: Exited with exit code 3" in out
    assert _steps(two_nodes, job_id)["0"][:2] == ("FAILED", 3)


def test_srun_outside_an_allocation_submits_waits_and_streams(two_nodes: Cluster,
                                                              workdir: Path) -> None:
    res = two_nodes.run("srun", "-N", "2", "-l", "bash", "-c",
                        "echo rank $SLURM_PROCID on $SLURMD_NODENAME; exit 4", cwd=workdir)
    assert res.returncode == 4, res.stderr
    assert sorted(res.stdout.splitlines()) == ["0: rank 0 on node1", "1: rank 1 on node2"]
    assert "task 0: Exited with exit code 4" in res.stderr
    ok = two_nodes.run("srun", "true", cwd=workdir)
    assert (ok.returncode, ok.stdout) == (0, "")


def test_cancelling_the_job_stops_its_steps_on_every_node(two_nodes: Cluster,
                                                          workdir: Path) -> None:
    script = workdir / "long.sh"
    script.write_text("#!/bin/bash\n"
                      "srun bash -c 'ps -o pgid= $$ | tr -d \" \" > pgid.$SLURM_PROCID; "
                      "sleep 600'\n")
    job_id = two_nodes.sbatch("-N", "2", str(script), cwd=workdir)
    groups = []
    for rank in (0, 1):
        path = workdir / f"pgid.{rank}"
        deadline = time.time() + 60
        while not (path.exists() and path.read_text().strip()):
            assert time.time() < deadline, f"task {rank} never started"
            time.sleep(0.1)
        groups.append(int(path.read_text()))
    res = two_nodes.run("scancel", str(job_id))
    assert res.returncode == 0, res.stderr
    assert two_nodes.wait(job_id, FINISHED)["state"] == "CANCELLED"
    deadline = time.time() + two_nodes.kill_wait + 30
    alive = groups
    while alive and time.time() < deadline:
        alive = [g for g in groups
                 if subprocess.run(["pgrep", "-g", str(g)], capture_output=True).returncode == 0]
        time.sleep(0.2)
    assert not alive, f"step tasks survived the job's cancellation: groups {alive}"
    deadline = time.time() + 30
    while _steps(two_nodes, job_id).get("0", ("RUNNING",))[0] == "RUNNING":
        assert time.time() < deadline, "step 0 never closed"
        time.sleep(0.2)
    assert _steps(two_nodes, job_id)["0"][0] == "CANCELLED"
    assert _steps(two_nodes, job_id)["batch"][0] == "CANCELLED"


def test_only_the_owner_starts_steps_in_a_job(two_nodes: Cluster, workdir: Path,
                                              other_user: str) -> None:
    job_id = two_nodes.sbatch("--wrap", "sleep 600", cwd=workdir)
    two_nodes.wait(job_id, {"RUNNING"})
    try:
        res = two_nodes.run("srun", "true", user=other_user,
                            env={"SLURM_JOB_ID": str(job_id)})
        assert res.returncode == 1
        assert res.stderr == (f"srun: error: Unable to create step for job {job_id}: "
                              "Access/permission denied\n")
    finally:
        two_nodes.run("scancel", str(job_id))


def test_steps_run_as_the_jobs_user_on_every_node(two_nodes: Cluster, workdir: Path,
                                                  other_user: str) -> None:
    import pwd

    uid = pwd.getpwnam(other_user).pw_uid
    job_id = two_nodes.sbatch("-N", "2", "--wrap", "srun -l id -u", user=other_user,
                              cwd=workdir)
    job = two_nodes.wait(job_id, FINISHED)
    out = (workdir / f"slurm-{job_id}.out").read_text()
    assert job["state"] == "COMPLETED", out
    assert sorted(out.splitlines()) == [f"0: {uid}", f"1: {uid}"]


def _forward_dirs(cluster: Cluster) -> list[str]:
    """What is left in the agents' forwarded-output spools (nothing, once steps ended)."""
    return [p.name for p in cluster.home.glob("spool/*/steps/*")]


def test_forwarded_output_needs_no_shared_directory(two_nodes: Cluster, workdir: Path) -> None:
    """Output of tasks on two nodes comes to srun over the wire: KILN_STEP_SPOOL names a
    directory nobody can make, and every line still arrives, labelled, on the right stream."""
    script = workdir / "fwd.sh"
    script.write_text("#!/bin/bash\nexport KILN_STEP_SPOOL=/nonexistent/kiln-no-spool\n"
                      "srun -l bash -c 'for i in 1 2 3; do echo out $SLURM_PROCID $i; "
                      "echo err $SLURM_PROCID $i >&2; done'\n")
    job_id = two_nodes.sbatch("-N", "2", "--ntasks-per-node", "2", "-o", "job.out", "-e",
                              "job.err", str(script), cwd=workdir)
    job = two_nodes.wait(job_id, FINISHED)
    out, err = (workdir / "job.out").read_text(), (workdir / "job.err").read_text()
    assert job["state"] == "COMPLETED", out + err
    for text, word in ((out, "out"), (err, "err")):
        assert sorted(text.splitlines()) == sorted(
            f"{p}: {word} {p} {i}" for p in range(4) for i in (1, 2, 3)), text
    assert _steps(two_nodes, job_id)["0"][:2] == ("COMPLETED", 0)
    assert _forward_dirs(two_nodes) == []


def test_megabytes_of_output_arrive_byte_exact(two_nodes: Cluster, workdir: Path) -> None:
    """Two tasks write ~3 MB each (more than schedd buffers for a step: chunking and
    backpressure); srun's output, split by label, is exactly what each task wrote."""
    import hashlib

    script = workdir / "big.sh"
    script.write_text("#!/bin/bash\nsrun -l -N 2 -n 2 bash -c 'head -c 2250000 /dev/urandom "
                      "| base64 -w 100 > data.$SLURM_PROCID; cat data.$SLURM_PROCID'\n")
    job_id = two_nodes.sbatch("-N", "2", str(script), cwd=workdir)
    job = two_nodes.wait(job_id, FINISHED, timeout=120)
    out = (workdir / f"slurm-{job_id}.out").read_bytes()
    assert job["state"] == "COMPLETED", out[-2000:]
    by_task: dict[bytes, list[bytes]] = {b"0": [], b"1": []}
    for line in out.splitlines(keepends=True):
        label, _, rest = line.partition(b": ")
        by_task[label].append(rest)
    for procid in (0, 1):
        sent = (workdir / f"data.{procid}").read_bytes()
        got = b"".join(by_task[str(procid).encode()])
        assert len(got) == len(sent) > 3_000_000
        assert hashlib.sha256(got).digest() == hashlib.sha256(sent).digest()
    assert _forward_dirs(two_nodes) == []


BURN = ("import sys, time; t = time.process_time()\n"
        "while time.process_time() - t < float(sys.argv[1]): pass\n")


def _cpu_seconds(text: str) -> float:
    """sacct's TotalCPU spelling ([D-]HH:MM:SS, MM:SS.mmm or 00:MM:SS) in seconds."""
    days, _, clock = text.rpartition("-")
    parts = [float(p) for p in clock.split(":")]
    if len(parts) == 2:
        parts.insert(0, 0.0)
    return int(days or 0) * 86400 + parts[0] * 3600 + parts[1] * 60 + parts[2]


def test_cpu_time_of_the_batch_shell_and_its_steps(two_nodes: Cluster, workdir: Path) -> None:
    """TotalCPU: the batch shell's tree (wait4 on the shell) on .batch, each srun step's tasks
    on every node summed on .0, and the job line the sum of both, as Slurm adds its steps;
    seff turns the job's figure into a CPU efficiency."""
    (workdir / "burn.py").write_text(BURN)
    script = workdir / "cpu.sh"
    script.write_text("#!/bin/bash\n/usr/bin/python3 burn.py 1.0\n"
                      "srun -N 2 -n 2 /usr/bin/python3 burn.py 0.5\n")
    job_id = two_nodes.sbatch("-N", "2", "-n", "2", str(script), cwd=workdir)
    job = two_nodes.wait(job_id, FINISHED)
    assert job["state"] == "COMPLETED", (workdir / f"slurm-{job_id}.out").read_text()
    res = two_nodes.run("sacct", "-P", "-n", "-o", "JobID,TotalCPU,UserCPU,SystemCPU",
                        "-j", str(job_id))
    assert res.returncode == 0, res.stderr
    rows = {line.split("|")[0]: line.split("|")[1:] for line in res.stdout.splitlines()}
    assert set(rows) == {str(job_id), f"{job_id}.batch", f"{job_id}.extern", f"{job_id}.0"}
    assert rows[f"{job_id}.extern"] == ["", "", ""]  # kiln runs no extern process
    cpu = {key: [_cpu_seconds(v) for v in values] for key, values in rows.items()
           if key.split(".")[-1] != "extern"}
    for total, user, system in cpu.values():
        assert abs(total - (user + system)) <= 0.002
    batch, step, whole = cpu[f"{job_id}.batch"][0], cpu[f"{job_id}.0"][0], cpu[str(job_id)][0]
    assert batch >= 1.0 and batch < 3.0, rows  # the shell's burner, reaped by the shell
    assert step >= 1.0 and step < 3.0, rows  # 0.5 s on each of the two nodes
    assert abs(whole - (batch + step)) <= 0.002, rows
    seff = two_nodes.run("seff", str(job_id))
    assert seff.returncode == 0, seff.stderr
    used = next(line for line in seff.stdout.splitlines() if line.startswith("CPU Utilized: "))
    assert used == f"CPU Utilized: 00:00:{int(whole):02d}", seff.stdout
    assert any(line.startswith("CPU Efficiency: ") and "%" in line and "unavailable" not in line
               for line in seff.stdout.splitlines()), seff.stdout
