"""The Alibaba openb (FGD) trace loader: node and pod lists, the artifact's rules, clear errors."""

from __future__ import annotations

from pathlib import Path

import pytest

from fusesched.traces.openb import OpenbFormatError, load_openb_nodes, load_openb_pods
from sample_traces import OPENB_NODES, OPENB_PODS

OPENB = Path(__file__).resolve().parents[2].parent / "shared" / "traces" / "alibaba-gpu-v2023"
needs_shared = pytest.mark.skipif(not OPENB.exists(), reason="../shared (real traces) is absent")

POD_HEADER = "name,cpu_milli,memory_mib,num_gpu,gpu_milli\n"


def test_node_list_fixture() -> None:
    nodes = load_openb_nodes(OPENB_NODES)
    assert nodes.names == ("node-a", "node-b", "node-c")
    assert nodes.gpus.tolist() == [2, 8, 0]
    assert nodes.model == ("P100", "G2", "")
    assert nodes.total_gpus == 10
    assert nodes.cpu_milli.tolist() == [64000, 96000, 32000]


def test_pod_list_fixture_applies_the_artifact_rules() -> None:
    pods = load_openb_pods(OPENB_PODS)
    assert len(pods) == 4
    assert pods.gpu_milli.tolist() == [1000, 460, 0, 1000]  # CPU-only → 0; 1200 clamped
    assert pods.gpu_spec == ((), ("V100M16", "V100M32"), (), ())  # ignored without GPUs
    assert pods.gpu_request.tolist() == [1000, 460, 0, 8000]
    assert pods.sharing.tolist() == [False, True, False, False]
    assert pods.deletion_time.tolist() == [100, -1, 9, 20]
    assert pods.qos[1] == "BE" and pods.phase[1] == "Pending"


def test_multigpu_style_file_without_optional_columns(tmp_path: Path) -> None:
    path = tmp_path / "pods.csv"
    path.write_text(POD_HEADER + "p0,1000,1024,2,1000\n")
    pods = load_openb_pods(path)
    assert pods.gpu_spec == ((),)
    assert pods.creation_time.tolist() == [-1]
    assert pods.qos == ("",)


@pytest.mark.parametrize(
    ("body", "message"),
    [
        ("p0,1000,1024,x,1000\n", "pods.csv:2: num_gpu must be a whole number"),
        ("p0,-5,1024,1,1000\n", "pods.csv:2: cpu_milli must not be negative"),
        ("p0,1000,1024,2,500\n", "pods.csv:2: a pod with 2 GPUs must take whole GPUs"),
        ("p0,1000,1024,1,0\n", "pods.csv:2: a pod with 1 GPUs needs gpu_milli > 0"),
        ("p0,1000,1024,1\n", "pods.csv:2: expected 5 fields, found 4"),
        ("p0,1,1,0,0\np0,1,1,0,0\n", "pods.csv:3: pod 'p0' already appears on line 2"),
        ("", "no rows after the header"),
    ],
)
def test_malformed_pod_rows(tmp_path: Path, body: str, message: str) -> None:
    path = tmp_path / "pods.csv"
    path.write_text(POD_HEADER + body)
    with pytest.raises(OpenbFormatError, match=message):
        load_openb_pods(path)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("", "the file is empty"),
        ("sn,cpu_milli,gpu\nn0,1,0\n", "nodes.csv:1: missing column\\(s\\) memory_mib, model"),
        ("sn,cpu_milli,memory_mib,gpu,model\nn0,1000,1024,4,\n", "nodes.csv:2: .* needs a model"),
    ],
)
def test_malformed_node_lists(tmp_path: Path, text: str, message: str) -> None:
    path = tmp_path / "nodes.csv"
    path.write_text(text)
    with pytest.raises(OpenbFormatError, match=message):
        load_openb_nodes(path)


def test_missing_file_is_file_not_found(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError):
        load_openb_pods(tmp_path / "absent.csv")


@needs_shared
def test_real_node_lists() -> None:
    gpu = load_openb_nodes(OPENB / "openb_node_list_gpu_node.csv")
    everything = load_openb_nodes(OPENB / "openb_node_list_all_node.csv")
    assert (len(gpu), gpu.total_gpus, int(gpu.cpu_milli.sum())) == (1213, 6212, 107_018_000)
    assert (len(everything), everything.total_gpus) == (1523, 6212)
    assert int((everything.gpus == 0).sum()) == 310


# GPU request / 6,212,000 per pod list (PROTOCOL.md section 2) and pod counts (SOURCE.md)
@needs_shared
@pytest.mark.parametrize(
    ("name", "pods", "ratio"),
    [
        ("default", 8152, 0.980),
        ("cpu0", 7064, 0.980),
        ("cpu300", 10094, 0.980),
        ("gpushare40", 8152, 0.908),
        ("gpushare100", 8152, 0.636),
        ("gpuspec33", 8152, 0.980),
        ("multigpu20", 8324, 1.141),
        ("multigpu50", 9061, 1.829),
    ],
)
def test_real_pod_lists(name: str, pods: int, ratio: float) -> None:
    pod_list = load_openb_pods(OPENB / f"openb_pod_list_{name}.csv")
    assert len(pod_list) == pods
    assert round(int(pod_list.gpu_request.sum()) / 6_212_000, 3) == ratio
