"""What `--policy default` and `--policy heuristic` mean (docs/HPC_DEFAULT.md,
docs/LEARNED_POLICY.md)."""

from __future__ import annotations

from fusesched.policies.learned.model import SHIPPED, load_model
from fusesched.policies.learned.preset import learned_config
from fusesched.policies.presets import PRESETS


def test_default_is_the_shipped_learned_policy_as_it_was_trained() -> None:
    preset = PRESETS["default"]
    assert preset.queue_order == "learned"
    model = load_model(SHIPPED)
    # the preset runs the model with the backfilling and prediction it was trained with
    assert (preset.backfill, preset.runtime_prediction) == (
        model.backfill,
        model.runtime_prediction,
    )
    assert preset.config() == learned_config("learned")
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
