"""The learned queue order: features without look-ahead, files that round-trip and fail
clearly, deterministic training (small hand-made traces, never the real ones)."""

from __future__ import annotations

import json
import math
import shutil
from pathlib import Path

import numpy as np
import pytest

from fusesched.policies.hpc_keys import HPC_KEYS
from fusesched.policies.learned.model import (
    FEATURES,
    SHIPPED,
    LearnedModel,
    LearnedPolicyError,
    feature_matrix,
    learned_key,
    load_model,
    save_model,
)
from fusesched.policies.learned.train import TrainSpec, train, training_sequences
from fusesched.policies.queue_order import QUEUE_ORDERS
from fusesched.policies.registry import CoreConfig, PolicyError
from fusesched.sim.engine import Simulation

SHARED = Path(__file__).resolve().parents[2].parent / "shared"


def synthetic_swf(path: Path, jobs: int = 240, seed: int = 3) -> Path:
    """A small SWF trace: 4 nodes of 4 CPUs, five users, loose walltime requests."""
    rng = np.random.default_rng(seed)
    lines = ["; MaxNodes: 4", "; MaxProcs: 16"]
    t = 0
    for i in range(1, jobs + 1):
        t += int(rng.integers(0, 400))
        run = int(rng.integers(5, 3000))
        procs = int(rng.choice([1, 2, 4, 8, 16]))
        request = run * int(rng.integers(1, 6))
        user = int(rng.integers(1, 6))
        lines.append(f"{i} {t} 0 {run} {procs} -1 -1 {procs} {request} -1 1 {user} 1 1 1 1 -1 -1")
    path.write_text("\n".join(lines) + "\n")
    return path


@pytest.fixture
def trace(tmp_path: Path) -> Path:
    return synthetic_swf(tmp_path / "tiny.swf")


def model_file(tmp_path: Path, weights: tuple[float, ...], name: str = "m.json") -> Path:
    path = tmp_path / name
    save_model(LearnedModel(weights), path)
    return path


# --- features ---------------------------------------------------------------------------------


def test_features_of_a_job_depend_only_on_that_job_and_now() -> None:
    submit = np.array([0.0, 100.0, 250.0])
    estimate = np.array([60.0, 3600.0, 5.0])
    procs = np.array([1.0, 64.0, 8.0])
    full = feature_matrix(submit, estimate, procs, 300.0)
    for i in range(3):
        one = feature_matrix(submit[i : i + 1], estimate[i : i + 1], procs[i : i + 1], 300.0)
        np.testing.assert_array_equal(one[0], full[i])
    assert full.shape == (3, len(FEATURES))
    assert full[1, 2] == pytest.approx(math.log10(201.0))  # waited 200 s
    assert full[2, 3] == pytest.approx(math.log10((50.0 + 5.0) / 10.0))  # bounded slowdown
    # a job submitted after `now` (never in a real queue) has waited nothing
    assert feature_matrix(np.array([400.0]), np.array([60.0]), np.array([1.0]), 300.0)[0, 2] == 0


def test_estimate_only_weights_order_as_sjf() -> None:
    rng = np.random.default_rng(0)
    submit = np.sort(rng.uniform(0, 1000, 50))
    estimate = rng.choice([60.0, 600.0, 3600.0, 7200.0], 50)
    procs = rng.choice([1.0, 4.0, 32.0], 50)
    key = learned_key(LearnedModel((1.0, 0.0, 0.0, 0.0, 0.0)), "x")
    ours = np.lexsort(tuple(reversed(key.vector(submit, estimate, procs, 2000.0))))
    sjf = np.lexsort(tuple(reversed(HPC_KEYS["sjf"].vector(submit, estimate, procs, 2000.0))))
    np.testing.assert_array_equal(ours, sjf)


def test_scalar_and_vector_keys_agree() -> None:
    key = learned_key(LearnedModel((0.5, 0.3, -0.4, -0.2, 0.1)), "x")
    s, r, n = np.array([10.0, 50.0]), np.array([100.0, 7.0]), np.array([3.0, 1.0])
    vec = key.vector(s, r, n, 500.0)
    for i in range(2):
        assert key.scalar(s[i], r[i], n[i], 500.0) == (vec[0][i], vec[1][i])


def test_schedules_use_no_future_information(trace: Path, tmp_path: Path) -> None:
    """Decisions made before a job arrives are the same whether or not that job exists."""
    path = model_file(tmp_path, (0.6, 0.2, -0.5, -0.4, 0.3))
    config = CoreConfig(f"learned:{path}", "easy", runtime_prediction="user-last2")
    (seq,) = training_sequences([trace], 1, length=64)
    full = Simulation(seq.nodes, list(seq.jobs), config).run().outcomes
    cut = 40
    horizon = seq.jobs[cut].spec.submit_time
    prefix = Simulation(seq.nodes, list(seq.jobs[:cut]), config).run().outcomes
    before = {o.job_id: o.start for o in full if o.start < horizon}
    assert before  # the check is not vacuous
    assert {o.job_id: o.start for o in prefix if o.start < horizon} == before


# --- files ------------------------------------------------------------------------------------


def test_saved_model_round_trips_and_gives_the_same_decisions(trace: Path, tmp_path: Path) -> None:
    (seq,) = training_sequences([trace], 1, length=64)
    model = train([seq], TrainSpec(budget=3, population=2, seed=1))
    first = tmp_path / "a.json"
    save_model(model, first)
    loaded = load_model(first)
    assert loaded.weights == model.weights
    assert loaded.meta["training"]["budget"] == 3
    second = tmp_path / "b.json"
    shutil.copy(first, second)

    def starts(path: Path) -> list[float]:
        config = CoreConfig(f"learned:{path}", "easy", runtime_prediction="user-last2")
        return [o.start for o in Simulation(seq.nodes, list(seq.jobs), config).run().outcomes]

    assert starts(first) == starts(second)
    s, r, n = np.array([0.0, 5.0]), np.array([10.0, 900.0]), np.array([2.0, 1.0])
    mine = learned_key(model, "m").vector(s, r, n, 60.0)
    theirs = QUEUE_ORDERS[f"learned:{first}"].keys  # through the registry
    from fusesched.policies.queue_order import FactArrays

    facts = FactArrays(s, r, n, np.zeros(2), np.zeros(2))
    for a, b in zip(mine, theirs(facts, 60.0), strict=True):
        np.testing.assert_array_equal(a, b)


def test_shipped_policy_is_registered_and_valid() -> None:
    assert "learned" in QUEUE_ORDERS
    assert QUEUE_ORDERS["learned"].dynamic
    model = load_model(SHIPPED)
    assert model.backfill == "easy"
    assert "training" in model.meta
    assert not any(k.startswith("learned:") for k in QUEUE_ORDERS)


@pytest.mark.parametrize(
    ("content", "reason"),
    [
        ("{not json", "is not JSON"),
        ("[1, 2]", "JSON object"),
        ('{"format": "other"}', "not a learned policy"),
        ({"version": 2}, "unsupported version"),
        ({"features": ["a"]}, "features must be exactly"),
        ({"weights": [1, 2]}, "'weights' has 2 entries"),
        ({"weights": ["a", 0, 0, 0, 0]}, "list of numbers"),
        ({"scales": [0, 1, 1, 1, 1]}, "scales must be positive"),
        ({"runtime_prediction": "psychic"}, "unknown runtime prediction"),
    ],
)
def test_bad_files_give_clear_errors(
    tmp_path: Path, content: str | dict[str, object], reason: str
) -> None:
    if isinstance(content, dict):
        data = LearnedModel((1.0, 0.0, 0.0, 0.0, 0.0)).to_dict()
        data.update(content)
        content = json.dumps(data)
    path = tmp_path / "bad.json"
    path.write_text(content)
    with pytest.raises(LearnedPolicyError, match=reason) as info:
        load_model(path)
    assert "bad.json" in str(info.value)
    with pytest.raises(PolicyError, match=reason):  # the core's config names the policy
        CoreConfig(queue_order=f"learned:{path}")


def test_non_finite_weights_and_missing_files_are_refused(tmp_path: Path) -> None:
    path = tmp_path / "nan.json"
    data = LearnedModel((1.0, 0.0, 0.0, 0.0, 0.0)).to_dict()
    data["weights"] = [float("nan"), 0, 0, 0, 0]
    path.write_text(json.dumps(data))
    with pytest.raises(LearnedPolicyError, match="finite"):
        load_model(path)
    with pytest.raises(PolicyError, match="cannot be read"):
        CoreConfig(queue_order=f"learned:{tmp_path / 'absent.json'}")
    assert "learned-typo" not in QUEUE_ORDERS


# --- training ---------------------------------------------------------------------------------


def test_training_is_deterministic_and_never_worse_than_its_start(trace: Path) -> None:
    seqs = training_sequences([trace], 2, length=64)
    spec = TrainSpec(budget=5, population=2, seed=7)
    a, b = train(seqs, spec), train(seqs, spec)
    assert a.weights == b.weights
    start = train(seqs, TrainSpec(budget=1, population=2, seed=7))  # the start (SJF) only
    assert start.weights == (1.0, 0.0, 0.0, 0.0, 0.0)
    assert a.meta["training"]["best_J"] <= start.meta["training"]["best_J"]  # evaluated first
    assert a.meta["objective"]["reference"] == "heuristic"
    assert a.meta["training"]["traces"] == ["tiny.swf"]
    assert math.isclose(float(np.linalg.norm(a.weights)), 1.0)


def test_training_with_energy_meters_it(trace: Path) -> None:
    seqs = training_sequences([trace], 1, length=64)
    model = train(seqs, TrainSpec(lam=5.0, budget=2, population=2, seed=0))
    assert model.meta["objective"]["lambda"] == 5.0
    assert "idle-timeout" in model.meta["objective"]["energy"]


@pytest.mark.skipif(not SHARED.is_dir(), reason="needs ../shared (the real traces)")
def test_shipped_policy_runs_on_a_real_trace_sequence() -> None:
    from fusesched.sim.protocols.rlscheduler_core import run_core_protocol
    from fusesched.traces.swf import load_swf, rlscheduler_jobs

    jobs = rlscheduler_jobs(load_swf(SHARED / "traces/lublin-swf/lublin_256.swf"))
    config = CoreConfig("learned", "easy", runtime_prediction="user-last2")
    res = run_core_protocol(jobs, config, "learned", iterations=1)
    assert res.mean_bounded_slowdown >= 1.0


def test_learned_config_uses_the_trained_setting(tmp_path: Path) -> None:
    from fusesched.policies.learned.preset import is_learned, learned_config

    path = tmp_path / "p.json"
    save_model(LearnedModel((1.0, 0, 0, 0, 0), backfill="conservative"), path)
    config = learned_config(f"learned:{path}", placement="best-fit")
    assert (config.queue_order, config.backfill) == (f"learned:{path}", "conservative")
    assert config.runtime_prediction == "user-last2"
    assert config.placement == "best-fit"
    assert is_learned("learned") and not is_learned("sjf")
    with pytest.raises(LearnedPolicyError, match="cannot be read"):
        learned_config(f"learned:{tmp_path / 'absent.json'}")


def test_training_sequences_can_skip_the_protocols_jobs(tmp_path: Path) -> None:
    trace = synthetic_swf(tmp_path / "long.swf", jobs=600)
    seqs = training_sequences([trace], 4, length=64, skip=300)
    assert len(seqs) == 4
    # every start leaves the first 300 jobs (and a sequence length) behind
    assert all(s.start >= 300 + 64 for s in seqs)
    assert all(len(s.jobs) == 64 for s in seqs)
    with pytest.raises(ValueError, match="none after the first"):
        training_sequences([trace], 1, length=64, skip=600)
    with pytest.raises(ValueError, match="non-negative"):
        training_sequences([trace], 1, length=64, skip=-1)


def test_selection_traces_state_their_requests_and_exclude_evaluation() -> None:
    from fusesched.cli.train_policy import EVALUATION_TAGS, SELECTION_TRACES

    names = [Path(t).name.upper() for t in SELECTION_TRACES]
    assert len(names) == 6
    assert not any(tag in n for n in names for tag in EVALUATION_TAGS)
    # traces without requests would let predictions see the run time (HPC_DEFAULT.md)
    for absent in ("SDSC-PAR", "NASA-IPSC", "LLNL-THUNDER", "LLNL-ATLAS", "LUBLIN", "HPC2N"):
        assert not any(absent in n for n in names)
