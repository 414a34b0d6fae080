"""The waiting jobs' node-equivalents (power/waiting.py), shared by the simulator and the live
controller."""

from __future__ import annotations

import numpy as np

from fusesched.power.waiting import demand_signal, largest_node, node_equivalents

# columns: CPUs, GPUs
EIGHT_GPU = np.array([64.0, 8.0])


def test_a_job_counts_its_larger_share_of_the_pools_largest_node() -> None:
    jobs = np.array([[1.0, 1.0], [32.0, 1.0], [128.0, 16.0]])  # 1/8, 1/2, a gang of 2
    assert node_equivalents(jobs, EIGHT_GPU) == 0.125 + 0.5 + 2.0
    assert largest_node(np.array([[32.0, 4.0], [16.0, 8.0]])).tolist() == [32.0, 8.0]
    assert largest_node(np.zeros((0, 2))).tolist() == [0.0, 0.0]


def test_a_resource_the_pool_lacks_is_left_out_a_job_asking_nothing_counted_is_a_node() -> None:
    cpu_pool = np.array([4.0, 0.0])
    assert node_equivalents(np.array([[1.0, 0.0], [2.0, 0.0]]), cpu_pool) == 0.75
    # memory only, say: it still needs a node to be woken for it
    assert node_equivalents(np.array([[0.0, 0.0], [1.0, 0.0]]), cpu_pool) == 1.25
    assert node_equivalents(np.zeros((0, 2)), cpu_pool) == 0.0
    assert node_equivalents(np.array([[1.0, 0.0]]), np.zeros(2)) == 0.0


def test_the_signal_is_running_plus_waiting_per_pool() -> None:
    assert demand_signal({"a": 2, "b": 0}, {"b": 0.5, "c": 1.0}) == {"a": 2.0, "b": 0.5, "c": 1.0}
