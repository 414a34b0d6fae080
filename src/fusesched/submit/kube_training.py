"""Kubeflow training jobs for ``schedulerName: fused-scheduler`` (docs/SUBMIT.md has the
tables): a ``kubeflow.org/v1`` PyTorchJob and a ``kubeflow.org/v2beta1`` MPIJob, each one gang
job.

**PyTorchJob** — a task group per replica type, ``master`` (at most one replica) then
``worker``. Every task gets what the training operator gives its pods, from fusesched's own
rendezvous variables (controller/launchenv.py): ``MASTER_ADDR`` (the Master's node),
``MASTER_PORT``, ``WORLD_SIZE`` (all replicas) and ``RANK`` (the Master 0, workers 1…n), and
``PYTHONUNBUFFERED=1``, and torchrun's ``PET_*`` defaults: the groups' launcher is
``torchrun`` (controller/torchrun_env.py: ``PET_NNODES``, ``PET_NODE_RANK``,
``PET_MASTER_ADDR``, ``PET_MASTER_PORT``; an integer ``nprocPerNode`` makes ``WORLD_SIZE``
tasks × it) and ``PET_NPROC_PER_NODE`` is ``nprocPerNode`` (kube_torchrun.py; a fixed-size
``elasticPolicy`` only). ``MASTER_PORT`` is fusesched's port of the job, not the operator's
23456 nor a ``pytorchjob-port``: tasks share their nodes' network, so a fixed port would clash
between jobs (a warning says so when a container names that port). The main container is the
one the default-container annotation names, else the one named ``pytorch``, else the first.
Its type is ``ai-train``.

**MPIJob** — one group of ``Worker.replicas × slotsPerWorker`` tasks (the job's MPI slots),
each with a worker pod's resources divided by ``slotsPerWorker``, at most ``slotsPerWorker`` to
a node (``placement.max_tasks_per_node``: a worker pod is one host of the hostfile); run as
fusesched runs MPI jobs: the Launcher's command (``mpirun …``) starts on the first node with a
hostfile of the slots, and ``mpirun`` reaches the other nodes through fusesched's launcher (no
ssh, no sshd in the workers: their command is not run). Only OpenMPI is supported.

Both: ``runPolicy.activeDeadlineSeconds`` → ``walltime_s``; ``backoffLimit`` →
``restart.max_restarts``; ``suspend`` → ``hold``; ``schedulingPolicy.minAvailable`` →
``min_member``, ``.queue`` → ``queue``; a replica ``restartPolicy`` of ``OnFailure``,
``Always`` or ``ExitCode`` → ``restart.retry_application_failures`` (the whole gang restarts);
``ExitCode`` → its group's ``retry_exits: signals`` too (only an exit 128-255, killed by a
signal, restarts the job; 1-127 fails it), and ``Never`` beside those → its group's
``retry_exits: never`` (any failing exit of it fails the job; an MPIJob's one group follows its
Launcher's policy, mpirun's); ``Always`` on the replica type whose success ends
the job (a PyTorchJob's Master, else its Worker; an MPIJob's Launcher) → ``restart.always``
too, with a warning.
A replica type without one has its operator's default: ``OnFailure`` for a PyTorchJob's and
an MPIJob's Launcher, ``Never`` for an MPIJob's Worker. A PyTorchJob's replica types may be
written in any case (``master``), as the training operator reads them.
"""

from __future__ import annotations

import difflib
import itertools
from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import Final

from fusesched.model.resources import CPU, MEMORY, Resources
from fusesched.submit._yamldoc import Document
from fusesched.submit.kube_pod import PodPart, PodReader
from fusesched.submit.kube_torchrun import torchrun_env
from fusesched.submit.problems import Loc, format_loc
from fusesched.submit.request import ParsedJob

_NONE: Final = frozenset[str]()
REPLICA_FIELDS: Final = frozenset({"replicas", "template", "restartPolicy"})
RESTART_POLICIES: Final = ("Always", "OnFailure", "Never", "ExitCode")
RUN_POLICY_USED: Final = frozenset(
    {"activeDeadlineSeconds", "backoffLimit", "schedulingPolicy", "suspend"}
)
RUN_POLICY_QUIET: Final = frozenset({"cleanPodPolicy", "ttlSecondsAfterFinished"})
RUN_POLICY_WARN: Final = frozenset({"managedBy"})
SCHEDULING_USED: Final = frozenset({"minAvailable", "queue"})
SCHEDULING_WARN: Final = frozenset({"minResources", "priorityClass", "scheduleTimeoutSeconds"})

PYTORCH_TYPES: Final = ("Master", "Worker")
PYTORCH_USED: Final = frozenset(
    {"pytorchReplicaSpecs", "runPolicy", "nprocPerNode", "elasticPolicy"}
)
#: The training operator's restartPolicy of a replica type that gives none.
PYTORCH_RESTART: Final = {"Master": "OnFailure", "Worker": "OnFailure"}
#: The container the training operator gives the rendezvous variables.
PYTORCH_CONTAINER: Final = "pytorch"
PYTORCH_PORT_NAME: Final = "pytorchjob-port"

MPI_TYPES: Final = ("Launcher", "Worker")
MPI_USED: Final = frozenset({"mpiReplicaSpecs", "runPolicy", "slotsPerWorker", "mpiImplementation"})
MPI_QUIET: Final = frozenset({"sshAuthMountPath", "launcherCreationPolicy"})
MPI_WARN: Final = frozenset({"runLauncherAsWorker"})
#: The MPI operator's restartPolicy of a replica type that gives none.
MPI_RESTART: Final = {"Launcher": "OnFailure", "Worker": "Never"}
#: Where Kubeflow's launcher finds its hostfile; fusesched's is in the task's folder.
KUBEFLOW_HOSTFILE: Final = "/etc/mpi/hostfile"
_NP_FLAGS: Final = ("-np", "-n", "--np", "-c")
#: Resources a worker's share may round up (millicores, bytes); others must divide evenly.
_DIVISIBLE: Final = frozenset({CPU, MEMORY, "ephemeral-storage"})


def pytorch_job(doc: Document) -> ParsedJob:
    """One gang job from a ``kubeflow.org/v1`` PyTorchJob document."""
    return _TrainingReader(doc).pytorch()


def mpi_job(doc: Document) -> ParsedJob:
    """One MPI job from a ``kubeflow.org/v2beta1`` MPIJob document."""
    return _TrainingReader(doc).mpi()


class _TrainingReader(PodReader):
    def replica_specs(
        self,
        spec: Mapping[str, object],
        key: str,
        types: Sequence[str],
        required: Sequence[str],
        *,
        any_case: bool = False,
    ) -> list[tuple[str, Mapping[str, object], Loc]]:
        """The replica specs under ``spec[key]`` in the order of ``types``, each with where
        it is written (``any_case``: ``master`` is the ``Master``, as the training operator
        reads the names of a PyTorchJob's replica types)."""
        loc: Loc = ("spec", key)
        if key not in spec:
            raise self.error(f"{key} is required", ("spec",))
        specs = self.mapping(spec[key], loc, key)
        found: dict[str, str] = {}  # replica type → the key it is written under
        for name in specs:
            kind = next((t for t in types if t.lower() == name.lower()), None)
            if kind is None or (kind != name and not any_case):
                close = difflib.get_close_matches(name, types, n=1)
                hint = f"; did you mean {close[0]!r}?" if close else ""
                raise self.error(
                    f"unknown replica type {name!r} (known: {', '.join(types)}){hint}",
                    (*loc, name),
                )
            if kind in found:
                raise self.error(
                    f"{found[kind]!r} and {name!r} are both the {kind} replica spec",
                    (*loc, name),
                )
            found[kind] = name
        for name in required:
            if name not in found:
                raise self.error(f"a {name} replica spec is required", loc)
        if not found:
            raise self.error(f"give a replica spec ({' or '.join(types)})", loc)
        out = []
        for name in types:
            if name in found:
                replica_loc: Loc = (*loc, found[name])
                replica = self.mapping(specs[found[name]], replica_loc, "a replica spec")
                self.check_fields(replica, replica_loc, REPLICA_FIELDS, _NONE, _NONE)
                if "template" not in replica:
                    raise self.error("a replica spec needs template", replica_loc)
                out.append((name, replica, replica_loc))
        return out

    def one_replica(self, name: str, replica: Mapping[str, object], loc: Loc) -> None:
        if self.count(replica, (*loc, "replicas"), 1) != 1:
            raise self.error(f"a {name} has exactly 1 replica", (*loc, "replicas"))

    def restart_policies(
        self,
        replicas: Sequence[tuple[str, Mapping[str, object], Loc]],
        data: dict[str, object],
        defaults: Mapping[str, str],
        decider: str,
    ) -> dict[str, str]:
        """Replicas restarted on failure → the job's application failures are retried; each
        replica type's policy is returned. A replica type without ``restartPolicy`` has the
        operator's default (``defaults``). ``Always`` on the replica type whose success ends
        the job (``decider``) restarts it after every exit (``restart.always``), as the
        operator's pods are; elsewhere it is ``OnFailure`` (that type's exit 0 does not end
        the job). ``ExitCode`` retries only exits by a signal, ``Never`` none
        (:func:`retry_exits`)."""
        policies: dict[str, str] = {}
        for kind, replica, loc in replicas:
            policy = replica.get("restartPolicy", defaults[kind])
            policies[kind] = self.one_of(policy, (*loc, "restartPolicy"), RESTART_POLICIES)
            if policies[kind] == "Always" and kind == decider:
                self.warn(
                    f"{format_loc((*loc, 'restartPolicy'))}: Always restarts the whole job "
                    f"after every exit of a task, 0 included (the {decider}'s success does not "
                    "end it), up to runPolicy.backoffLimit times; give OnFailure for a job "
                    "that ends when it succeeds",
                    (*loc, "restartPolicy"),
                )
        if any(policy != "Never" for policy in policies.values()):
            restart = data.setdefault("restart", {})
            assert isinstance(restart, dict)
            restart["retry_application_failures"] = True
            if policies.get(decider) == "Always":
                restart["always"] = True
        return policies

    def run_policy(self, spec: Mapping[str, object], data: dict[str, object]) -> None:
        loc: Loc = ("spec", "runPolicy")
        policy = self.mapping(spec.get("runPolicy"), loc, "runPolicy")
        self.check_fields(policy, loc, RUN_POLICY_USED, RUN_POLICY_QUIET, RUN_POLICY_WARN)
        if "activeDeadlineSeconds" in policy:
            data["walltime_s"] = self.seconds(policy, (*loc, "activeDeadlineSeconds"))
        if "backoffLimit" in policy:
            restart = data.setdefault("restart", {})
            assert isinstance(restart, dict)
            restart["max_restarts"] = self.count(policy, (*loc, "backoffLimit"), 0, least=0)
            self.renames["restart.max_restarts"] = (*loc, "backoffLimit")
        if "suspend" in policy:
            data["hold"] = self.flag(policy, (*loc, "suspend"))
        gang_loc: Loc = (*loc, "schedulingPolicy")
        gang = self.mapping(policy.get("schedulingPolicy"), gang_loc, "schedulingPolicy")
        self.check_fields(gang, gang_loc, SCHEDULING_USED, _NONE, SCHEDULING_WARN)
        if "minAvailable" in gang:
            least_loc: Loc = (*gang_loc, "minAvailable")
            self.set_field(data, "min_member", self.count(gang, least_loc, 1), least_loc)
        if "queue" in gang:
            self.set_field(data, "queue", gang["queue"], (*gang_loc, "queue"))

    # -- PyTorchJob -------------------------------------------------------------------------

    def pytorch(self) -> ParsedJob:
        meta, spec = self.read_object()
        self.check_fields(spec, ("spec",), PYTORCH_USED, _NONE, _NONE)
        replicas = self.replica_specs(spec, "pytorchReplicaSpecs", PYTORCH_TYPES, (), any_case=True)
        data: dict[str, object] = {"type": "ai-train"}
        parts: list[PodPart] = []
        counts = {
            kind: self.count(replica, (*loc, "replicas"), 1) for kind, replica, loc in replicas
        }
        pet = torchrun_env(self, spec, counts.get("Worker", 0))
        for index, (kind, replica, loc) in enumerate(replicas):
            if kind == "Master":
                self.one_replica(kind, replica, loc)
            template_loc: Loc = (*loc, "template")
            part = self.template(replica["template"], template_loc, index, main=PYTORCH_CONTAINER)
            # torchrun: the tasks get its PET_* variables when they start (torchrun_env.py)
            part.group.update(name=kind.lower(), replicas=counts[kind], launcher="torchrun")
            self.renames[f"groups[{index}].replicas"] = (*loc, "replicas")
            env = part.group.setdefault("env", {})
            assert isinstance(env, dict)
            env.setdefault("PYTHONUNBUFFERED", "1")  # as the training operator sets it
            for name, value in pet.items():
                env.setdefault(name, value)
            self.named_port(replica["template"], template_loc)
            parts.append(part)
        self.run_policy(spec, data)
        # (the Master's success ends the job; without a Master, the Workers')
        policies = self.restart_policies(replicas, data, PYTORCH_RESTART, replicas[0][0])
        for part, (kind, _, _) in zip(parts, replicas, strict=True):
            retry_exits(part.group, policies[kind], data)
        self.combine(parts, data)
        self.metadata(meta, data)
        return self.request(data)

    def named_port(self, template: object, loc: Loc) -> None:
        """Warn that a ``pytorchjob-port`` is not the job's ``MASTER_PORT`` here."""
        spec = template.get("spec") if isinstance(template, Mapping) else None
        containers = spec.get("containers") if isinstance(spec, Mapping) else None
        for i, container in enumerate(containers if isinstance(containers, list) else []):
            ports = container.get("ports") if isinstance(container, Mapping) else None
            for j, port in enumerate(ports if isinstance(ports, list) else []):
                if isinstance(port, Mapping) and port.get("name") == PYTORCH_PORT_NAME:
                    port_loc: Loc = (*loc, "spec", "containers", i, "ports", j)
                    self.warn(
                        f"{format_loc(port_loc)}: {PYTORCH_PORT_NAME} is not the job's "
                        "MASTER_PORT: fusesched gives each job its own MASTER_PORT (tasks "
                        "share their nodes' network, so a fixed port would clash)",
                        port_loc,
                    )

    # -- MPIJob -----------------------------------------------------------------------------

    def mpi(self) -> ParsedJob:
        meta, spec = self.read_object()
        self.check_fields(spec, ("spec",), MPI_USED, MPI_QUIET, MPI_WARN)
        implementation = spec.get("mpiImplementation", "OpenMPI")
        if implementation != "OpenMPI":
            raise self.error(
                f"{implementation!r} is not supported: fusesched runs MPI jobs with OpenMPI's "
                "mpirun (give OpenMPI)",
                ("spec", "mpiImplementation"),
            )
        slots = self.count(spec, ("spec", "slotsPerWorker"), 1)
        replicas = self.replica_specs(spec, "mpiReplicaSpecs", MPI_TYPES, MPI_TYPES)
        (_, launcher, launcher_loc), (_, worker, worker_loc) = replicas
        self.one_replica("Launcher", launcher, launcher_loc)
        workers = self.count(worker, (*worker_loc, "replicas"), 1)
        worker_template: Loc = (*worker_loc, "template")
        workers_part = self.template(worker["template"], worker_template, 0, command=False)
        for probe in ("liveness", "readiness"):
            if probe in workers_part.group:
                self.warn(
                    f"the Worker's {probe} probe is not run: mpirun starts the ranks",
                    (*worker_loc, "template"),
                )
        # (the launcher's resources are not booked: mpirun runs in the first slot)
        part = self.template(launcher["template"], (*launcher_loc, "template"), 0, resources=False)
        group = part.group
        self.check_argv(group, workers * slots)
        group["env"] = {**_env(workers_part.group), **_env(group)}
        self.one_image(group, workers_part.group, launcher_loc)
        group.update(
            name="worker",
            replicas=workers * slots,
            launcher="mpi",
            resources=self.share(workers_part.resources, slots, worker_loc),
        )
        self.renames["groups[0].resources"] = (*worker_loc, "template", "spec", "containers")
        self.renames["groups[0].replicas"] = (*worker_loc, "replicas")
        if part.placement != workers_part.placement and any(part.placement.values()):
            self.warn(
                "the Launcher's node selection is ignored: mpirun runs on the first node of "
                "the Worker's slots",
                part.loc,
            )
        deadlines = [d for d in (part.deadline_s, workers_part.deadline_s) if d is not None]
        merged = replace(workers_part, group=group, deadline_s=min(deadlines, default=None))
        if merged.priority is None:
            merged.priority, merged.priority_loc = part.priority, part.priority_loc
        data: dict[str, object] = {}
        self.run_policy(spec, data)
        policies = self.restart_policies(replicas, data, MPI_RESTART, "Launcher")
        # (the one group's exit is mpirun's, the Launcher's: the Workers run none of it)
        retry_exits(merged.group, policies["Launcher"], data)
        self.combine([merged], data)
        # a worker pod is a host of slotsPerWorker slots: at most that many to a node
        data["placement"] = {**_mapping(data["placement"]), "max_tasks_per_node": slots}
        self.metadata(meta, data)
        return self.request(data)

    def share(self, total: Resources, slots: int, loc: Loc) -> dict[str, str]:
        """One slot's share of a worker's resources (cpu and memory rounded up)."""
        out: dict[str, int] = {}
        for name, amount in total.items():
            if name not in _DIVISIBLE and amount % slots:
                raise self.error(
                    f"{name}: a worker's {amount} cannot be shared evenly by slotsPerWorker "
                    f"({slots}) slots; give a multiple of {slots}",
                    (*loc, "template", "spec", "containers"),
                )
            out[name] = -(-amount // slots)
        return Resources(out).to_spec()

    def check_argv(self, group: Mapping[str, object], slots: int) -> None:
        """The launcher's command must not name Kubeflow's hostfile nor more processes than
        there are slots."""
        argv = group.get("argv")
        words = [str(w) for w in argv] if isinstance(argv, list) else []
        where = self.rename(("groups", 0, "argv"))
        if any(KUBEFLOW_HOSTFILE in word for word in words):
            raise self.error(
                f"{KUBEFLOW_HOSTFILE} does not exist under fusesched: leave --hostfile out "
                "(mpirun reads the job's hostfile from $OMPI_MCA_orte_default_hostfile; "
                "the file is $FUSESCHED_HOSTFILE)",
                where,
            )
        for flag, value in itertools.pairwise(words):
            if flag in _NP_FLAGS and value.isdigit() and int(value) > slots:
                raise self.error(
                    f"mpirun {flag} {value} asks for more processes than the job's {slots} "
                    "slots (Worker replicas × slotsPerWorker)",
                    where,
                )

    def one_image(
        self, launcher: dict[str, object], worker: Mapping[str, object], loc: Loc
    ) -> None:
        """The launcher and the ranks run in one image: the launcher's, else the worker's."""
        mine, theirs = launcher.get("image"), worker.get("image")
        if mine is not None and theirs is not None and mine != theirs:
            raise self.error(
                f"the Launcher's image {mine!r} differs from the Worker's {theirs!r}: "
                "fusesched runs mpirun and its ranks in one image; give the same",
                (*loc, "template"),
            )
        if mine is None and theirs is not None:
            launcher["image"] = theirs


def retry_exits(group: dict[str, object], policy: str, data: Mapping[str, object]) -> None:
    """The failing exits of ``group``'s tasks that the job (``data``) retries, by the
    ``restartPolicy`` of the replica type they stand for, when it retries any (another type
    restarts): ``ExitCode``, only exits by a signal (the operator restarts a pod that exited
    128-255, killed by a signal: 137 SIGKILL, 143 SIGTERM, and fails the job on 1-127, permanent
    errors); ``Never``, none (the operator fails the job); otherwise all."""
    restart = data.get("restart")
    if not isinstance(restart, Mapping) or not restart.get("retry_application_failures"):
        return  # (none retried: every type is Never)
    if policy == "ExitCode":
        group["retry_exits"] = "signals"
    elif policy == "Never":
        group["retry_exits"] = "never"


def _env(group: Mapping[str, object]) -> dict[str, object]:
    return _mapping(group.get("env"))


def _mapping(value: object) -> dict[str, object]:
    return dict(value) if isinstance(value, Mapping) else {}
