"""The options of a job submitted as Slurm's whose value its tasks are told, as Slurm's
sbatch tells them: :class:`SlurmJobOptions` (a request's ``slurm_options``), each field only
when its option was given, and the variables they make (:meth:`SlurmJobOptions.variables`):
``SLURM_NTASKS_PER_NODE``, ``SLURM_CPUS_PER_GPU``, ``SLURM_MEM_PER_CPU`` and
``SLURM_MEM_PER_GPU`` (MiB, rounded up, as Slurm's sizes), ``SLURM_GPUS``,
``SLURM_GPUS_PER_NODE``, ``SLURM_GPUS_PER_TASK`` (as given: ``a100:2``),
``SLURM_JOB_DEPENDENCY`` (``-d`` as given) and ``SLURM_EXPORT_ENV`` (``--export`` as given,
unless it is ``ALL``: ``srun`` in the job reads it as its own ``--export``).

:func:`fusesched.submit.sbatch_slurm_options.slurm_options` reads them from a batch
script's options; :func:`with_submit_host` gives a Slurm job the host it was submitted from
(``SLURM_SUBMIT_HOST``: fusesched.model.submit_host). Pure.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated, Final

from pydantic import Field

from fusesched.submit.strict_model import StrictModel

if TYPE_CHECKING:
    from fusesched.submit.request import JobRequest

#: An option's text as given (``--export``'s may be as long as the variables it names).
OptionText = Annotated[str, Field(min_length=1, max_length=4096)]
ExportText = Annotated[str, Field(min_length=1)]
Count = Annotated[int, Field(ge=1)]
MiB = Annotated[int, Field(ge=0)]
_VARIABLES: Final = {
    "ntasks_per_node": "SLURM_NTASKS_PER_NODE",
    "cpus_per_gpu": "SLURM_CPUS_PER_GPU",
    "mem_per_cpu": "SLURM_MEM_PER_CPU",
    "mem_per_gpu": "SLURM_MEM_PER_GPU",
    "gpus": "SLURM_GPUS",
    "gpus_per_node": "SLURM_GPUS_PER_NODE",
    "gpus_per_task": "SLURM_GPUS_PER_TASK",
    "dependency": "SLURM_JOB_DEPENDENCY",
    "export": "SLURM_EXPORT_ENV",
}


class SlurmJobOptions(StrictModel):
    """The options given (None: not given) whose values a Slurm job's tasks are told."""

    ntasks_per_node: Count | None = None  # --ntasks-per-node
    cpus_per_gpu: Count | None = None  # --cpus-per-gpu
    mem_per_cpu: MiB | None = None  # --mem-per-cpu, in MiB
    mem_per_gpu: MiB | None = None  # --mem-per-gpu, in MiB
    gpus: OptionText | None = None  # -G/--gpus as given
    gpus_per_node: OptionText | None = None  # --gpus-per-node as given
    gpus_per_task: OptionText | None = None  # --gpus-per-task as given
    dependency: OptionText | None = None  # -d/--dependency as given
    export: ExportText | None = None  # --export as given (never ALL)

    def variables(self) -> dict[str, str]:
        """Slurm's variable for each option given."""
        given = self.model_dump(exclude_none=True)
        return {_VARIABLES[name]: str(value) for name, value in given.items()}


def with_submit_host(request: JobRequest, host: str | None) -> JobRequest:
    """``request`` submitted from ``host`` (a name :func:`~fusesched.model.submit_host.
    this_host` or a submission file's checked ``submit_host`` gives): a job with Slurm's
    variables (``slurm_env``) keeps it as its ``submit_host`` (its tasks'
    ``SLURM_SUBMIT_HOST``), unless it names one already; others need none."""
    if host is None or not request.slurm_env or request.submit_host is not None:
        return request
    return request.model_copy(update={"submit_host": host})
