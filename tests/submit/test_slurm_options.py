"""The Slurm options whose values a job's tasks are told (``slurm_options``: submit/
slurm_options.py), read from sbatch's, run's and salloc's options, and the host a Slurm job
was submitted from (``submit_host``)."""

from __future__ import annotations

from dataclasses import replace

import pytest

from fusesched.cli.salloc_plan import (
    Allocation,
    allocation_env,
    allocation_request,
    split_salloc_args,
    told_env,
)
from fusesched.cli.srun_args import job_request, split_run_args
from fusesched.submit.errors import SubmitError
from fusesched.submit.request import JobRequest, parse_request
from fusesched.submit.sbatch import parse_sbatch
from fusesched.submit.slurm_options import SlurmJobOptions, with_submit_host

SCRIPT = "#!/bin/sh\ntrue\n"
GROUP = {"argv": ["true"], "resources": {"cpu": "1"}}


def told(*args: str, script: str = SCRIPT, **env: str) -> dict[str, str]:
    """The variables ``sbatch ARGS`` tells the script's tasks of its options."""
    options = parse_sbatch(script, args=args, submit_env=env).request.slurm_options
    return {} if options is None else options.variables()


@pytest.mark.parametrize(
    ("args", "variables"),
    [
        (["--ntasks-per-node=2", "-N", "2"], {"SLURM_NTASKS_PER_NODE": "2"}),
        (["--mem-per-cpu=2G"], {"SLURM_MEM_PER_CPU": "2048"}),  # MiB
        (["--mem-per-cpu=1500K"], {"SLURM_MEM_PER_CPU": "2"}),  # (rounded up, as Slurm's)
        (["--mem-per-cpu", "4000"], {"SLURM_MEM_PER_CPU": "4000"}),  # (M by default)
        (["-G", "a100:2"], {"SLURM_GPUS": "a100:2"}),  # as given
        (["--gpus-per-node=2", "-N", "1"], {"SLURM_GPUS_PER_NODE": "2"}),
        (
            ["--gpus-per-task=1", "--cpus-per-gpu=8", "--mem-per-gpu=10G"],
            {"SLURM_GPUS_PER_TASK": "1", "SLURM_CPUS_PER_GPU": "8", "SLURM_MEM_PER_GPU": "10240"},
        ),
        (
            ["-d", "afterok:12:13,afterany:14"],
            {"SLURM_JOB_DEPENDENCY": "afterok:12:13,afterany:14"},
        ),
        (["--export=NONE"], {"SLURM_EXPORT_ENV": "NONE"}),
        (["--export=ALL,GREETING=hi"], {"SLURM_EXPORT_ENV": "ALL,GREETING=hi"}),
        (["--export=ALL"], {}),  # (srun's default: Slurm sets none)
        (["--export=all"], {}),
        (["-n", "4", "--mem=1G", "--gres=gpu:4", "-c", "2"], {}),  # (none of them)
        ([], {}),
    ],
)
def test_each_option_given_is_told_as_slurm_tells_it(
    args: list[str], variables: dict[str, str]
) -> None:
    assert told(*args) == variables


def test_the_scripts_options_and_the_environments_count() -> None:
    script = "#!/bin/sh\n#SBATCH --ntasks-per-node=3 --export=NONE\ntrue\n"
    assert told(script=script) == {"SLURM_NTASKS_PER_NODE": "3", "SLURM_EXPORT_ENV": "NONE"}
    # the command line over SBATCH_EXPORT over the script, as for the job's environment
    assert told(script=script, SBATCH_EXPORT="NONE,A=1")["SLURM_EXPORT_ENV"] == "NONE,A=1"
    assert told("--export=B=2", script=script, SBATCH_EXPORT="NONE,A=1") == {
        "SLURM_NTASKS_PER_NODE": "3",
        "SLURM_EXPORT_ENV": "B=2",
    }
    assert told(SBATCH_MEM_PER_CPU="1G") == {"SLURM_MEM_PER_CPU": "1024"}
    with pytest.raises(SubmitError, match="mem-per-cpu"):  # (checked once, as before)
        told("--mem-per-cpu=lots")


def test_a_plain_request_says_nothing_of_them() -> None:
    request = parse_sbatch(SCRIPT).request
    assert request.slurm_options is None and request.submit_host is None
    dumped = request.to_json()
    assert "slurm_options" not in dumped and "submit_host" not in dumped  # (older controllers)
    given = parse_request({"slurm_options": {"ntasks_per_node": 2}, "groups": [GROUP]})
    assert given.slurm_options == SlurmJobOptions(ntasks_per_node=2)
    with pytest.raises(SubmitError, match="ntasks_per_node"):
        parse_request({"slurm_options": {"ntasks_per_node": 0}, "groups": [GROUP]})
    with pytest.raises(SubmitError, match="slurm_options"):
        parse_request({"slurm_options": {"nodes": 2}, "groups": [GROUP]})


def test_a_slurm_job_keeps_the_host_it_was_submitted_from() -> None:
    slurm = parse_sbatch(SCRIPT).request
    hosted = with_submit_host(slurm, "login-1")
    assert hosted.submit_host == "login-1"
    assert with_submit_host(hosted, "other").submit_host == "login-1"  # (its own kept)
    assert with_submit_host(slurm, None).submit_host is None
    plain = JobRequest.model_validate({"groups": [GROUP]})
    assert with_submit_host(plain, "login-1").submit_host is None  # (no Slurm variables)
    for bad in ("-dash", "two words", "x" * 256, "tab\there"):
        with pytest.raises(SubmitError, match="submit_host"):
            parse_request({"submit_host": bad, "groups": [GROUP]})


def test_run_tells_what_srun_tells() -> None:
    """``fusesched run``'s job: the options as srun's tasks are told them, not sbatch's
    ``SLURM_EXPORT_ENV``, and the host it ran on."""
    args = ["--ntasks-per-node=1", "-N", "2", "-d", "singleton", "--export=NONE", "true"]
    request, _ = job_request(split_run_args(args), "/home/ann", "login-2")
    assert request.submit_host == "login-2"
    assert request.slurm_options is not None
    assert request.slurm_options.variables() == {
        "SLURM_NTASKS_PER_NODE": "1",
        "SLURM_JOB_DEPENDENCY": "singleton",
    }
    bare, _ = job_request(split_run_args(["--export=NONE", "true"]))
    assert bare.slurm_options is None and bare.submit_host is None


def test_salloc_tells_the_command_what_salloc_tells() -> None:
    parsed = split_salloc_args(["-N", "2", "--ntasks-per-node=2", "--mem-per-cpu=1G"])
    request, _ = allocation_request(parsed, ("bash",))
    request = request.model_copy(update={"reservation": "maint"})
    env = told_env(request, "login-3")
    assert env == {
        "SLURM_SUBMIT_HOST": "login-3",
        "SLURM_JOB_RESERVATION": "maint",
        "SLURM_NTASKS_PER_NODE": "2",
        "SLURM_MEM_PER_CPU": "1024",
    }
    deps, _ = allocation_request(split_salloc_args(["-d", "singleton"]), ("bash",))
    assert told_env(deps, None) == {}  # (not salloc's: sbatch's and srun's)
    job = {"id": "42", "name": "bash", "user": "ann"}
    allocation = Allocation(job, [("n1", 2)], "http://c", "/tmp/f", "/tmp/f/h", "/tmp/f/bin")
    plain = allocation_env({}, allocation, None, None)
    assert not {"SLURM_SUBMIT_HOST", "SLURM_NTASKS_PER_NODE"} & set(plain)
    given = allocation_env({}, replace(allocation, told=env), None, None)
    assert {name: given[name] for name in env} == env
