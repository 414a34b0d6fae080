"""What `--policy default` and `--policy heuristic` mean (docs/HPC_DEFAULT.md,
docs/LEARNED_POLICY.md)."""

from __future__ import annotations

from fusesched.policies.learned.model import SHIPPED, load_model
from fusesched.policies.learned.preset import learned_config
from fusesched.policies.presets import PRESETS


def test_default_is_the_heuristic_while_the_learned_policy_does_not_beat_it() -> None:
    """The adoption rule (bench/learned_policy.py) keeps the heuristic: with waiting jobs
    re-predicted the shipped learned order scores 1.068 against it on validation."""
    default, heuristic = PRESETS["default"], PRESETS["heuristic"]
    assert default.config() == heuristic.config()


def test_the_learned_policy_runs_as_it_was_trained() -> None:
    model = load_model(SHIPPED)
    config = learned_config("learned")
    assert (config.backfill, config.runtime_prediction) == (
        model.backfill,
        model.runtime_prediction,
    )
    assert model.runtime_prediction == "user-last2-request"


def test_shipped_policy_was_trained_on_selection_traces_only() -> None:
    training = load_model(SHIPPED).meta["training"]
    names = " ".join(training["traces"]).upper()
    for evaluation in ("SDSC-SP2", "HPC2N", "LUBLIN"):
        assert evaluation not in names
    for no_requests in ("SDSC-PAR", "NASA-IPSC", "LLNL"):
        assert no_requests not in names
    # drawn after the first 10,000 jobs: apart from the protocol's sequences
    assert all(start >= 10_000 for _, start, _ in training["sequences"])


def test_heuristic_is_the_selected_heuristic_combination() -> None:
    preset = PRESETS["heuristic"]
    assert (preset.queue_order, preset.backfill, preset.runtime_prediction) == (
        "unicep-textbook",
        "easy",
        "user-last2-request",
    )
