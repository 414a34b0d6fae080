"""The deep-learning scheduling protocol (docs/DL_SCHEDULING.md): a dedicated runner for GPU
training jobs of unknown length, with checkpoint-boundary preemption, restart cost and GPU
locality."""
