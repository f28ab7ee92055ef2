"""GPU discovery: the fake specs tests use, and the NVML path against a stand-in pynvml."""

import re
import subprocess
import sys
from pathlib import Path

import pynvml
import pytest

from agentd import gpus
from agentd.gpus import GPUDiscoveryError, discover, node_resources
from kiln.model import gres_type


def test_fake_eight_h100_in_two_islands():
    found = discover("8xH100-80GB", islands=2, seed="node1")
    assert [g.index for g in found] == list(range(8))
    assert {g.model for g in found} == {"NVIDIA H100-80GB"}
    assert {g.memory_mb for g in found} == {81920}
    assert [g.island for g in found] == [0, 0, 0, 0, 1, 1, 1, 1]
    assert len({g.uuid for g in found}) == 8
    assert all(g.uuid.startswith("GPU-") and len(g.uuid) == 40 for g in found)
    assert gres_type(found[0].model) == "h100"


def test_fake_uuids_repeat_per_node_and_differ_between_nodes():
    a1, a2, b = (discover("4xA100", seed=s) for s in ("a", "a", "b"))
    assert [g.uuid for g in a1] == [g.uuid for g in a2]
    assert not {g.uuid for g in a1} & {g.uuid for g in b}


@pytest.mark.parametrize("spec,count,model,memory", [
    ("4xA100", 4, "NVIDIA A100", 81920),
    ("2xA100-SXM4-40GB", 2, "NVIDIA A100-SXM4-40GB", 40960),
    ("1xL4-24G", 1, "NVIDIA L4-24G", 24576),
    ("3xT4-16000MB", 3, "NVIDIA T4-16000MB", 16000),
    ("8", 8, "NVIDIA H100-80GB", 81920),
    ("0", 0, None, None),
])
def test_fake_specs(spec, count, model, memory):
    found = discover(spec, seed="n")
    assert len(found) == count
    if count:
        assert found[0].model == model and found[0].memory_mb == memory


def test_fake_islands_clamped_to_gpu_count():
    assert [g.island for g in discover("2xA100", islands=4, seed="n")] == [0, 1]
    assert [g.island for g in discover("4xA100", islands=1, seed="n")] == [0, 0, 0, 0]


@pytest.mark.parametrize("spec", ["x", "8xH100 extra", "-1", "8x", "H100", "2000xH100"])
def test_bad_fake_spec_is_a_one_line_value_error(spec):
    with pytest.raises(ValueError) as info:
        discover(spec, seed="n")
    assert "\n" not in str(info.value) and spec.strip() in str(info.value)


def test_bad_island_count():
    with pytest.raises(ValueError):
        discover("8xH100", islands=0, seed="n")


def test_fake_gpus_take_their_islands_cpus():
    found = discover("4xH100", islands=2, seed="n", island_cpus=["0-15,32", "16-31"])
    assert [g.cpus for g in found] == [[*range(16), 32]] * 2 + [list(range(16, 32))] * 2
    assert all(g.cpus == [] for g in discover("4xH100", islands=2, seed="n"))


@pytest.mark.parametrize("island_cpus,says", [
    (["0-15"], "one CPU list per GPU island (2 here)"),
    (["0-15", "16-31", "32-47"], "one CPU list per GPU island (2 here)"),
    ("0-15", "one CPU list per GPU island"),
    (["0-15", "x"], "invalid CPU list 'x' in gpu_island_cpus"),
    (["0-15", ""], "invalid CPU list '' in gpu_island_cpus"),
    (["0-15", 7], "invalid CPU list 7 in gpu_island_cpus"),
])
def test_bad_island_cpus_are_a_one_line_value_error(island_cpus, says):
    with pytest.raises(ValueError) as info:
        discover("4xH100", islands=2, seed="n", island_cpus=island_cpus)
    assert says in str(info.value) and "\n" not in str(info.value)


def _nvml_error(code):
    return pynvml.NVMLError(code)


def test_no_nvidia_library_means_no_gpus(monkeypatch):
    def missing():
        raise _nvml_error(pynvml.NVML_ERROR_LIBRARY_NOT_FOUND)
    monkeypatch.setattr(pynvml, "nvmlInit", missing)
    assert discover() == []


def test_broken_nvml_raises_a_clear_error(monkeypatch):
    def broken():
        raise _nvml_error(pynvml.NVML_ERROR_UNKNOWN)
    monkeypatch.setattr(pynvml, "nvmlInit", broken)
    with pytest.raises(GPUDiscoveryError) as info:
        discover()
    assert str(info.value).startswith("NVML initialisation failed")


class _FakeMemory:
    total = 80 * 1024**3


def _install_fake_nvml(monkeypatch, nvlinked, fail_on=None):
    """Four GPUs; ``nvlinked`` pairs are NVLink peers, all else meets at the host bridge."""
    calls = []

    def handle(i):
        if fail_on == i:
            raise _nvml_error(pynvml.NVML_ERROR_GPU_IS_LOST)
        return i

    def p2p(a, b, index):
        assert index == pynvml.NVML_P2P_CAPS_INDEX_NVLINK
        linked = (min(a, b), max(a, b)) in nvlinked
        return pynvml.NVML_P2P_STATUS_OK if linked else pynvml.NVML_P2P_STATUS_NOT_SUPPORTED

    fakes = {
        "nvmlInit": lambda: calls.append("init"),
        "nvmlShutdown": lambda: calls.append("shutdown"),
        "nvmlDeviceGetCount": lambda: 4,
        "nvmlDeviceGetHandleByIndex": handle,
        "nvmlDeviceGetUUID": lambda h: f"GPU-0000000{h}-aaaa-bbbb-cccc-dddddddddddd",
        "nvmlDeviceGetName": lambda h: b"NVIDIA H100 80GB HBM3",
        "nvmlDeviceGetMemoryInfo": lambda h: _FakeMemory(),
        "nvmlDeviceGetP2PStatus": p2p,
        "nvmlDeviceGetTopologyCommonAncestor": lambda a, b: pynvml.NVML_TOPOLOGY_HOSTBRIDGE,
        "nvmlDeviceGetCpuAffinity": lambda h, words: [0] * words,  # an empty mask: none known
        "nvmlDeviceGetMigMode": lambda h: [0, 0],  # MIG off (NVML_DEVICE_MIG_DISABLE)
    }
    for name, fn in fakes.items():
        monkeypatch.setattr(pynvml, name, fn)
    return calls


def test_nvml_devices_and_nvlink_islands(monkeypatch):
    calls = _install_fake_nvml(monkeypatch, nvlinked={(0, 1), (2, 3)})
    found = discover()
    assert [g.island for g in found] == [0, 0, 1, 1]
    assert found[2].uuid == "GPU-00000002-aaaa-bbbb-cccc-dddddddddddd"
    assert found[0].model == "NVIDIA H100 80GB HBM3"  # bytes from older pynvml decoded
    assert found[0].memory_mb == 81920
    assert calls == ["init", "shutdown"]


def test_nvml_pcie_switch_joins_an_island(monkeypatch):
    _install_fake_nvml(monkeypatch, nvlinked=set())
    monkeypatch.setattr(pynvml, "nvmlDeviceGetTopologyCommonAncestor",
                        lambda a, b: pynvml.NVML_TOPOLOGY_SINGLE if {a, b} == {1, 3}
                        else pynvml.NVML_TOPOLOGY_SYSTEM)
    assert [g.island for g in discover()] == [0, 1, 2, 1]


def test_nvml_topology_not_supported_keeps_the_gpus(monkeypatch):
    _install_fake_nvml(monkeypatch, nvlinked=set())

    def unsupported(*args):
        raise _nvml_error(pynvml.NVML_ERROR_NOT_SUPPORTED)
    monkeypatch.setattr(pynvml, "nvmlDeviceGetP2PStatus", unsupported)
    monkeypatch.setattr(pynvml, "nvmlDeviceGetTopologyCommonAncestor", unsupported)
    assert [g.island for g in discover()] == [0, 1, 2, 3]


def test_nvml_cpu_affinity_is_each_gpus_near_cpus(monkeypatch):
    """nvmlDeviceGetCpuAffinity's mask, 64 CPUs a word: GPUs 0-1 near CPUs 0-3 and 64,
    GPUs 2-3 near 4-7 (a two-word mask on a host of more than 64 CPUs)."""
    _install_fake_nvml(monkeypatch, nvlinked=set())
    monkeypatch.setattr(gpus.os, "cpu_count", lambda: 96)
    asked = []

    def affinity(handle, words):
        asked.append(words)
        return [0x0F, 1] if handle < 2 else [0xF0, 0]
    monkeypatch.setattr(pynvml, "nvmlDeviceGetCpuAffinity", affinity)
    assert [g.cpus for g in discover()] == [[0, 1, 2, 3, 64]] * 2 + [[4, 5, 6, 7]] * 2
    assert asked == [2] * 4


def test_nvml_without_cpu_affinity_leaves_it_unknown(monkeypatch):
    """An nvidia-ml-py without the call, a driver without the function, a GPU that does not
    report it: the GPUs are found, their affinity is unknown ([])."""
    _install_fake_nvml(monkeypatch, nvlinked=set())
    monkeypatch.delattr(pynvml, "nvmlDeviceGetCpuAffinity")
    assert [g.cpus for g in discover()] == [[]] * 4
    for code in (pynvml.NVML_ERROR_FUNCTION_NOT_FOUND, pynvml.NVML_ERROR_NOT_SUPPORTED):
        def missing(handle, words, code=code):
            raise _nvml_error(code)
        monkeypatch.setattr(pynvml, "nvmlDeviceGetCpuAffinity", missing, raising=False)
        assert [g.cpus for g in discover()] == [[]] * 4


def test_nvml_lost_gpu_raises_and_shuts_down(monkeypatch):
    calls = _install_fake_nvml(monkeypatch, nvlinked=set(), fail_on=2)
    with pytest.raises(GPUDiscoveryError) as info:
        gpus.nvml_gpus()
    assert "device query failed" in str(info.value)
    assert calls == ["init", "shutdown"]


def test_node_resources():
    cpus, memory_mb = node_resources()
    assert cpus >= 1 and memory_mb > 0


def test_str_names_of_current_nvidia_ml_py(monkeypatch):
    _install_fake_nvml(monkeypatch, nvlinked=set())
    monkeypatch.setattr(pynvml, "nvmlDeviceGetName", lambda h: "NVIDIA A100-SXM4-80GB")
    assert {g.model for g in discover()} == {"NVIDIA A100-SXM4-80GB"}


# --- the real library, unpatched (issue 19, item 8) ----------------------------------------


def _nvidia_smi_gpus() -> list[str]:
    import shutil
    import subprocess

    if shutil.which("nvidia-smi") is None:
        return []
    res = subprocess.run(["nvidia-smi", "-L"], capture_output=True, text=True, timeout=60)
    return [line for line in res.stdout.splitlines() if line.startswith("GPU ")]


def test_unpatched_nvml_discovery_on_this_host():
    """No stand-in: the installed nvidia-ml-py against this host's driver. Without NVIDIA's
    driver (CI) it finds no GPUs and raises nothing; on a GPU host, the GPUs nvidia-smi lists,
    each with its UUID, model and memory, and a CPU affinity of this host's CPUs."""
    import os

    found = discover()
    if not os.path.exists("/dev/nvidiactl"):
        assert found == []
        return
    listed = _nvidia_smi_gpus()
    assert len(found) == len(listed) > 0, (found, listed)
    for gpu, line in zip(found, listed, strict=True):
        assert gpu.uuid.startswith("GPU-") and gpu.uuid in line, (gpu, line)
        assert gpu.model and gpu.model in line and gpu.memory_mb > 1024, gpu
        # NVML's affinity, where the driver reports it, names this host's CPUs only
        assert set(gpu.cpus) <= set(range(os.cpu_count() or 1)), gpu


def test_kiln_up_says_when_it_falls_back_to_fake_gpus(capsys):
    """The unpatched discovery on a host without GPUs: kiln up pretends, and says so."""
    import os

    from cli import up

    if os.path.exists("/dev/nvidiactl"):
        assert up._default_gpus() == ""  # a GPU host uses its real GPUs
        return
    assert up._default_gpus() == up.DEFAULT_FAKE_GPUS
    assert capsys.readouterr().err == (
        "kiln up: NVML found no GPUs here (no NVIDIA driver): each node gets 8xH100-80GB fake "
        "GPUs, whose figures in sacct and seff are simulated\n")


def test_kiln_up_stops_on_a_failing_nvml(monkeypatch, tmp_path):
    """NVML present but failing: kiln up stops with NVML's error, writes no config and starts
    nothing, rather than coming up with pretend GPUs."""
    from click.testing import CliRunner

    from cli.up import up

    def broken():
        raise _nvml_error(pynvml.NVML_ERROR_UNKNOWN)
    monkeypatch.setattr(pynvml, "nvmlInit", broken)
    res = CliRunner().invoke(up, [], env={"KILN_HOME": str(tmp_path / "home"),
                                         "KILN_CONF": None})
    assert res.exit_code == 1
    assert res.output == ("Error: NVML initialisation failed: Unknown Error; fix the driver, "
                          "or pass --fake-gpus SPEC (e.g. --fake-gpus 8xH100-80GB) to run with "
                          "pretend GPUs\n")
    assert not (tmp_path / "home" / "kiln.toml").exists()


def test_the_gpu_node_check_says_in_one_line_that_there_is_nothing_to_check(tmp_path) -> None:
    """bin/check-gpu-node (the check for a real driver, docs/agent.md) on a host without
    nvidia-smi (or run by a user): exit 2 and one line, never a traceback."""
    script = Path(__file__).parents[3] / "bin" / "check-gpu-node"
    res = subprocess.run([sys.executable, str(script)], env={"PATH": str(tmp_path)},
                         capture_output=True, text=True, timeout=60)
    assert res.returncode == 2 and res.stdout == ""
    assert len(res.stderr.splitlines()) == 1 and res.stderr.startswith("check-gpu-node: ")


# --- MIG ------------------------------------------------------------------------------------

MINORS = Path(__file__).with_name("mig-minors")  # /proc/driver/nvidia-caps/mig-minors' lines


def test_fake_mig_seven_1g_instances_of_an_a100_80gb():
    found = discover("1xA100-80GB", seed="node1", fake_mig="1g.10gb:7")
    assert [g.index for g in found] == list(range(7))
    assert all(isinstance(g, gpus.MigGPU) and g.parent == 0 for g in found)
    assert {gres_type(g.model) for g in found} == {"1g.10gb"}
    assert found[0].model == "NVIDIA A100-80GB MIG 1g.10gb"
    assert {g.memory_mb for g in found} == {10240}
    assert len({g.uuid for g in found}) == 7
    assert all(re.fullmatch(r"MIG-[0-9a-f]{8}(-[0-9a-f]{4}){3}-[0-9a-f]{12}", g.uuid)
               for g in found)
    again = discover("1xA100-80GB", seed="node1", fake_mig="1g.10gb:7")
    other = discover("1xA100-80GB", seed="node2", fake_mig="1g.10gb:7")
    assert [g.uuid for g in again] == [g.uuid for g in found]  # stable per node
    assert not {g.uuid for g in other} & {g.uuid for g in found}
    # the caps minors the driver gives GPU instance 1.. and its compute instance 0
    assert found[0].caps == [12, 13] and found[1].caps == [21, 22]


def test_fake_mig_partitions_every_gpu_alike():
    found = discover("2xA100", seed="n", fake_mig="3g.40gb:2")
    assert gpus.parents(found) == [0, 0, 1, 1] and gpus.physical_count(found) == 2
    assert [g.island for g in found] == [0, 0, 1, 1]
    assert {gres_type(g.model) for g in found} == {"3g.40gb"}
    assert len(discover("1xA100-SXM4-40GB", seed="n", fake_mig="1g.5gb:7")) == 7
    assert len(discover("2xH100-80GB", seed="n", fake_mig="7g.80gb")) == 2


@pytest.mark.parametrize("gpu,spec,says", [
    ("1xA100-80GB", "3g.40gb:3", "9 compute slices and 12 memory slices do not fit a 80GB GPU"),
    ("1xA100-80GB", "1g.10gb:8", "8 instances of 1g.10gb (1 to 7)"),
    ("1xA100-40GB", "1g.10gb:7", "7 compute slices and 14 memory slices do not fit a 40GB"),
    ("1xA100-80GB", "3g.40gb:2,1g.10gb:1", "7 compute slices and 9 memory slices"),
    ("2xA100-80GB", "7g.80gb/1g.10gb:7/1g.10gb", "3 layouts for 2 GPUs"),
    ("1xA100-80GB", "4g.40gb,4g.40gb", "8 compute slices"),
    ("1xA100-80GB", "1g.5gb", "no MIG profile 1g.5gb on a GPU of 80GB"),
    ("1xL4-24GB", "1g.10gb", "MIG needs a 40GB or 80GB GPU"),
    ("1xA100-80GB", "big", "expected PROFILE[:COUNT]"),
])
def test_bad_fake_mig_is_a_one_line_value_error(gpu, spec, says):
    with pytest.raises(ValueError) as info:
        discover(gpu, seed="n", fake_mig=spec)
    assert "\n" not in str(info.value) and says in str(info.value), str(info.value)


def test_fake_mig_needs_fake_gpus():
    with pytest.raises(ValueError, match="give --fake-gpus too"):
        discover("", fake_mig="1g.10gb:7")


def test_mig_minors_are_read_from_the_drivers_file():
    minors = gpus.parse_mig_minors(MINORS.read_text())
    assert minors[(0, 1, None)] == 12 and minors[(0, 1, 0)] == 13
    assert minors[(1, 2, 7)] == int(next(line.split()[1] for line in MINORS.read_text()
                                         .splitlines() if line.startswith("gpu1/gi2/ci7/")))
    assert "config" not in str(minors) and len(minors) == 2 * 3 * 9  # config, monitor: not a job's
    assert gpus.read_mig_minors(str(MINORS.with_name("absent"))) == {}


class _MigMemory:
    def __init__(self, gb):
        self.total = gb * 1024**3


def _install_mig_nvml(monkeypatch, modes=(1, 1), profiles=("1g.10gb", "1g.10gb")):
    """Two A100 80GB. GPU 0: MIG instances in slots 0 and 2 (GI 7 and 9), slot 1 empty; GPU 1:
    one instance (GI 1, CI 0). Handles of instances are (gpu, slot)."""
    _install_fake_nvml(monkeypatch, nvlinked={(0, 1)})
    monkeypatch.setattr(pynvml, "nvmlDeviceGetCount", lambda: 2)
    slots = {0: {0: (7, 0), 2: (9, 0)}, 1: {0: (1, 0)}}

    def mig_handle(handle, slot):
        if slot not in slots[handle]:
            raise _nvml_error(pynvml.NVML_ERROR_NOT_FOUND)
        return (handle, slot)

    def name(h):
        if isinstance(h, tuple):
            return f"NVIDIA A100-SXM4-80GB MIG {profiles[h[0]]}"
        return "NVIDIA A100-SXM4-80GB"

    fakes = {
        "nvmlDeviceGetMigMode": lambda h: [modes[h], modes[h]],
        "nvmlDeviceGetMaxMigDeviceCount": lambda h: 7,
        "nvmlDeviceGetMigDeviceHandleByIndex": mig_handle,
        "nvmlDeviceGetGpuInstanceId": lambda h: slots[h[0]][h[1]][0],
        "nvmlDeviceGetComputeInstanceId": lambda h: slots[h[0]][h[1]][1],
        "nvmlDeviceGetUUID": lambda h: (f"MIG-{h[0]}{h[1]}000000-aaaa-bbbb-cccc-dddddddddddd"
                                        if isinstance(h, tuple) else f"GPU-{h}"),
        "nvmlDeviceGetName": name,
        "nvmlDeviceGetMemoryInfo": lambda h: _MigMemory(10 if isinstance(h, tuple) else 80),
        "nvmlDeviceGetMinorNumber": lambda h: h,
    }
    for fn_name, fn in fakes.items():
        monkeypatch.setattr(pynvml, fn_name, fn)


def test_nvml_mig_mode_gpus_are_their_instances(monkeypatch):
    _install_mig_nvml(monkeypatch)
    found = gpus.nvml_gpus(pynvml, minors_path=str(MINORS))
    assert [g.index for g in found] == [0, 1, 2]  # the instances, never the GPUs
    assert [g.uuid for g in found] == ["MIG-00000000-aaaa-bbbb-cccc-dddddddddddd",
                                       "MIG-02000000-aaaa-bbbb-cccc-dddddddddddd",
                                       "MIG-10000000-aaaa-bbbb-cccc-dddddddddddd"]
    assert {gres_type(g.model) for g in found} == {"1g.10gb"}
    assert [g.memory_mb for g in found] == [10240] * 3
    assert [(g.parent, g.gi, g.ci) for g in found] == [(0, 7, 0), (0, 9, 0), (1, 1, 0)]
    assert [g.island for g in found] == [0, 0, 0]  # the parents' NVLink island
    # caps: 'gpu0/gi7/access' and 'gpu0/gi7/ci0/access'; gi 7 and 9 are not in this excerpt
    # of mig-minors, gpu1/gi1's are
    assert found[0].caps == [] and found[2].caps == [147, 148]


def test_nvml_mixed_mig_and_whole_gpus_or_profiles_are_refused_in_one_line(monkeypatch):
    _install_mig_nvml(monkeypatch, modes=(1, 0))
    with pytest.raises(GPUDiscoveryError) as info:
        gpus.nvml_gpus(pynvml, minors_path=str(MINORS))
    assert str(info.value) == ("GPUs 0 are in MIG mode and 1 not: kiln hands out a node's MIG "
                               "instances or its whole GPUs, not both (put all of the node's "
                               "GPUs in MIG mode, or none)")


def test_nvml_mixed_profiles_are_typed_gpus_each(monkeypatch):
    _install_mig_nvml(monkeypatch, profiles=("1g.10gb", "3g.40gb"))
    found = gpus.nvml_gpus(pynvml, minors_path=str(MINORS))
    assert {gres_type(g.model) for g in found} == {"1g.10gb", "3g.40gb"}
    assert all(isinstance(g, gpus.MigGPU) and g.uuid.startswith("MIG-") for g in found)


def test_fake_mig_mixed_layouts_as_real_gpus_hold_them():
    found = discover("2xA100-80GB", seed="n", fake_mig="3g.40gb:1,2g.20gb:1,1g.10gb:2")
    assert [gres_type(g.model) for g in found] == ["3g.40gb", "2g.20gb", "1g.10gb",
                                                   "1g.10gb"] * 2
    assert [g.parent for g in found] == [0] * 4 + [1] * 4
    assert [g.memory_mb for g in found[:4]] == [40960, 20480, 10240, 10240]
    assert len({g.uuid for g in found}) == 8
    per_gpu = discover("2xA100-80GB", seed="n", fake_mig="4g.40gb,3g.40gb/1g.10gb:7")
    assert [gres_type(g.model) for g in per_gpu] == ["4g.40gb", "3g.40gb"] + ["1g.10gb"] * 7
    # placements, not only sums: 1g.20gb:4 takes every even memory slice pair
    assert len(discover("1xH100-80GB", seed="n", fake_mig="1g.20gb:4")) == 4
    assert gpus.mig_placement(["3g.40gb", "2g.20gb", "2g.20gb"], 80) == [4, 0, 2]
    assert gpus.mig_placement(["1g.20gb"] * 4 + ["1g.10gb"], 80) is None


def test_nvml_mig_pending_is_not_mig(monkeypatch):
    """MIG mode pending (set, the GPU not yet reset): still a whole GPU."""
    _install_mig_nvml(monkeypatch)
    monkeypatch.setattr(pynvml, "nvmlDeviceGetMigMode", lambda h: [0, 1])
    found = gpus.nvml_gpus(pynvml, minors_path=str(MINORS))
    assert [g.uuid for g in found] == ["GPU-0", "GPU-1"]
    assert not any(isinstance(g, gpus.MigGPU) for g in found)


def test_visible_devices_name_mig_instances_by_uuid():
    found = discover("1xA100-80GB", seed="n", fake_mig="1g.10gb:7")
    env = gpus.visible_environment({"CUDA_VISIBLE_DEVICES": "1,3", "SLURM_JOB_GPUS": "1,3",
                                    "PATH": "/bin"}, found)
    assert env == {"CUDA_VISIBLE_DEVICES": f"{found[1].uuid},{found[3].uuid}",
                   "SLURM_JOB_GPUS": "1,3", "PATH": "/bin"}
    whole = discover("4xA100", seed="n")
    assert gpus.visible_environment({"CUDA_VISIBLE_DEVICES": "0,2"}, whole) == {
        "CUDA_VISIBLE_DEVICES": "0,2"}
    assert gpus.visible_environment({}, found) == {}
