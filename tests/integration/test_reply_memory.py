"""Issue 31 item 2: connections that ask for a listing with big scripts and never read it
cannot grow schedd's memory past its reply bounds, and another request is still answered."""

from __future__ import annotations

import socket
import time

import psutil

from kiln.wire import protocol
from kiln.wire.localsock import HEADER
from tests.integration.cluster import Cluster

JOBS, SCRIPT_MB, CONNECTIONS = 8, 3, 20  # a 24 MB reply each; 480 MB unbounded


def test_unread_listings_with_big_scripts_are_bounded(cluster: Cluster, tmp_path) -> None:
    script = tmp_path / "big.sh"
    script.write_text("#!/bin/sh\n" + ("# " + "x" * 1021 + "\n") * (SCRIPT_MB * 1024 - 1))
    ids = [cluster.sbatch("--hold", str(script)) for _ in range(JOBS)]
    schedd = psutil.Process(cluster._daemon_pids()["schedd"])
    before = schedd.memory_info().rss
    request = protocol.request("query_jobs", {"job_ids": [str(i) for i in ids],
                                              "with_script": True}, 1)
    socks, peak = [], before
    try:
        for _ in range(CONNECTIONS):
            s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
            s.connect(cluster.socket)
            s.sendall(HEADER.pack(len(request)) + request)  # and never read
            socks.append(s)
            time.sleep(0.3)
            peak = max(peak, schedd.memory_info().rss)
        time.sleep(1)
        peak = max(peak, schedd.memory_info().rss)
        res = cluster.run("squeue", "-h", "-j", str(ids[0]))  # a bystander's answer
        assert res.returncode == 0 and str(ids[0]) in res.stdout, res.stderr
        # 64 MiB in all and one reply of 24 MB, besides what schedd had (the old code: 480 MB)
        assert peak - before < 200 * 1024 * 1024, f"schedd grew {(peak - before) >> 20} MB"
    finally:
        for s in socks:
            s.close()
        cluster.run("scancel", *map(str, ids))
    cluster.expect_log("slowest reader")
