"""How a request's tasks start, read from the request alone (the controller's launches and the
router's choice of pools both ask):

* :func:`batch_mode` — one task starts the job (a batch script, or ``mpirun`` for an MPI
  group) and launches the rest, as ``sbatch`` does; else every task is started, one process
  each;
* :func:`torchrun_groups` — the groups whose tasks form one ``torchrun`` rendezvous (a
  PyTorchJob's Master and Worker replicas, or any group whose launcher is ``torchrun``): their
  tasks, and only theirs, get torchrun's ``PET_*`` variables (controller/torchrun_env.py).
"""

from __future__ import annotations

from fusesched.submit.identify import command_words, infer_launcher
from fusesched.submit.request import JobRequest
from fusesched.submit.task_group import Launcher, TaskGroupRequest


def batch_mode(request: JobRequest) -> bool:
    """One task starts the job (a script or mpirun launches the rest), as sbatch does."""
    group = request.groups[0]
    if request.hetjob:  # (its first component's first task runs the script: hetjob_env.py)
        return True
    mpi = infer_launcher(group) is Launcher.MPI  # (the launcher given, else the command's)
    return len(request.groups) == 1 and (group.script is not None or mpi)


def warning_to_steps(request: JobRequest) -> bool:
    """Whether ``request``'s warning signal (``sbatch --signal``) goes to its job steps, as
    Slurm's without ``B:``: a batch script's own, not in a container; its shell is not
    signalled (controller/step_warning.py)."""
    warning = request.signal
    if warning is None or warning.main_only or not batch_mode(request):
        return False
    group = request.groups[0]
    return group.script is not None and group.image is None


def standalone(group: TaskGroupRequest) -> bool:
    """Whether ``group``'s command runs ``torchrun --standalone`` (a rendezvous of its own on
    each task's machine: it takes no ``PET_*``)."""
    return "--standalone" in command_words(group)


def torchrun_groups(request: JobRequest) -> tuple[str, ...]:
    """The names of the groups whose tasks form the job's one torchrun world, in order: those
    whose launcher (given, or inferred from the command) is ``torchrun``, not ``--standalone``;
    none when the job starts in batch mode (its script runs once and launches the rest)."""
    if batch_mode(request):
        return ()
    return tuple(
        g.name
        for g in request.groups
        if infer_launcher(g) is Launcher.TORCHRUN and not standalone(g)
    )


def torchrun_tasks(request: JobRequest) -> int:
    """How many tasks the torchrun world of :func:`torchrun_groups` spans."""
    world = set(torchrun_groups(request))
    return sum(g.replicas for g in request.groups if g.name in world)
