"""``fusesched sacct --reason``: the reason codes Slurm 22.05's sacct takes, and the test of a
job's reason against them.

Slurm 22.05's sacct refuses a reason it does not know (``sacct: fatal: unrecognized job reason
value 'foo'``) and takes any case of one it knows (``dependency``), the whole name only
(``Dep`` is refused). :data:`REASONS` is that list: every name Slurm 22.05.8's sacct took,
found by asking it each word of its library (its ``job_reason_string`` names, from ``None``,
``Priority`` and ``Resources`` to the ``QOS…`` and ``Assoc…`` limits). ``-R``, which Slurm's
man page gives as the short form, is no option of its sacct (``invalid option -- 'R'``), so
fusesched's refuses it too, saying to use ``--reason``.

A job matches when the code Slurm's squeue prints for its reason (``%r``:
:func:`fusesched.cli.slurm_reasons.slurm_reason`) is one of the codes given:
``ReqNodeNotAvail, UnavailableNodes:n3`` by its code ``ReqNodeNotAvail``.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Final

from fusesched.cli.id_lists import comma_list
from fusesched.cli.slurm_reasons import slurm_reason

_NAMES: Final = """
AccountingPolicy AccountNotAllowed AssocGrpBB AssocGrpBBMinutes AssocGrpBBRunMinutes
AssocGrpBilling AssocGrpBillingMinutes AssocGrpBillingRunMinutes AssocGrpCpuLimit
AssocGrpCPUMinutesLimit AssocGrpCPURunMinutesLimit AssocGrpEnergy AssocGrpEnergyMinutes
AssocGrpEnergyRunMinutes AssocGrpGRES AssocGrpGRESMinutes AssocGrpGRESRunMinutes
AssocGrpJobsLimit AssocGrpLicense AssocGrpLicenseMinutes AssocGrpLicenseRunMinutes
AssocGrpMemLimit AssocGrpMemMinutes AssocGrpMemRunMinutes AssocGrpNodeLimit
AssocGrpNodeMinutes AssocGrpNodeRunMinutes AssocGrpSubmitJobsLimit AssocGrpUnknown
AssocGrpUnknownMinutes AssocGrpUnknownRunMinutes AssocGrpWallLimit AssociationJobLimit
AssociationResourceLimit AssociationTimeLimit AssocMaxBBMinutesPerJob AssocMaxBBPerJob
AssocMaxBBPerNode AssocMaxBillingMinutesPerJob AssocMaxBillingPerJob AssocMaxBillingPerNode
AssocMaxCpuMinutesPerJobLimit AssocMaxCpuPerJobLimit AssocMaxCpuPerNode
AssocMaxEnergyMinutesPerJob AssocMaxEnergyPerJob AssocMaxEnergyPerNode
AssocMaxGRESMinutesPerJob AssocMaxGRESPerJob AssocMaxGRESPerNode AssocMaxJobsLimit
AssocMaxLicenseMinutesPerJob AssocMaxLicensePerJob AssocMaxMemMinutesPerJob
AssocMaxMemPerJob AssocMaxMemPerNode AssocMaxNodeMinutesPerJob AssocMaxNodePerJobLimit
AssocMaxSubmitJobLimit AssocMaxUnknownMinutesPerJob AssocMaxUnknownPerJob
AssocMaxUnknownPerNode AssocMaxWallDurationPerJobLimit BadConstraints BeginTime
BlockFreeAction BlockMaxError BurstBufferOperation BurstBufferResources BurstBufferStageIn
Cleaning DeadLine Dependency DependencyNeverSatisfied FedJobLock FrontEndDown InactiveLimit
InvalidAccount InvalidQOS JobArrayTaskLimit JobHeldAdmin JobHeldUser JobHoldMaxRequeue
JobLaunchFailure Licenses MaxBBPerAccount MaxBillingPerAccount MaxCpuPerAccount
MaxEnergyPerAccount MaxGRESPerAccount MaxJobsPerAccount MaxLicensePerAccount
MaxMemoryPerAccount MaxMemPerLimit MaxNodePerAccount MaxSubmitJobsPerAccount
MaxUnknownPerAccount NodeDown None NonZeroExitCode OutOfMemory PartitionConfig
PartitionDown PartitionInactive PartitionNodeLimit PartitionTimeLimit PowerNotAvail
PowerReserved Priority Prolog QOSGrpBB QOSGrpBBMinutes QOSGrpBBRunMinutes QOSGrpBilling
QOSGrpBillingMinutes QOSGrpBillingRunMinutes QOSGrpCpuLimit QOSGrpCPUMinutesLimit
QOSGrpCPURunMinutesLimit QOSGrpEnergy QOSGrpEnergyMinutes QOSGrpEnergyRunMinutes QOSGrpGRES
QOSGrpGRESMinutes QOSGrpGRESRunMinutes QOSGrpJobsLimit QOSGrpLicense QOSGrpLicenseMinutes
QOSGrpLicenseRunMinutes QOSGrpMemLimit QOSGrpMemoryMinutes QOSGrpMemoryRunMinutes
QOSGrpNodeLimit QOSGrpNodeMinutes QOSGrpNodeRunMinutes QOSGrpSubmitJobsLimit QOSGrpUnknown
QOSGrpUnknownMinutes QOSGrpUnknownRunMinutes QOSGrpWallLimit QOSJobLimit QOSMaxBBPerJob
QOSMaxBBPerNode QOSMaxBBPerUser QOSMaxBillingMinutesPerJob QOSMaxBillingPerJob
QOSMaxBillingPerNode QOSMaxBillingPerUser QOSMaxCpuMinutesPerJobLimit QOSMaxCpuPerJobLimit
QOSMaxCpuPerNode QOSMaxCpuPerUserLimit QOSMaxEnergyMinutesPerJob QOSMaxEnergyPerJob
QOSMaxEnergyPerNode QOSMaxEnergyPerUser QOSMaxGRESMinutesPerJob QOSMaxGRESPerJob
QOSMaxGRESPerNode QOSMaxGRESPerUser QOSMaxJobsPerUserLimit QOSMaxLicenseMinutesPerJob
QOSMaxLicensePerJob QOSMaxLicensePerUser QOSMaxMemoryMinutesPerJob QOSMaxMemoryPerJob
QOSMaxMemoryPerNode QOSMaxMemoryPerUser QOSMaxNodeMinutesPerJob QOSMaxNodePerJobLimit
QOSMaxNodePerUserLimit QOSMaxSubmitJobPerUserLimit QOSMaxUnknownMinutesPerJob
QOSMaxUnknownPerJob QOSMaxUnknownPerNode QOSMaxUnknownPerUser QOSMaxWallDurationPerJobLimit
QOSMinBB QOSMinBilling QOSMinCpuNotSatisfied QOSMinEnergy QOSMinGRES QOSMinLicense
QOSMinMemory QOSMinNode QOSMinUnknown QOSNotAllowed QOSResourceLimit QOSTimeLimit
QOSUsageThreshold ReqNodeNotAvail Reservation ReservationDeleted Resources SystemFailure
TimeLimit
"""
#: Slurm 22.05's reason codes, as its commands write them.
REASONS: Final = frozenset(_NAMES.split())
_BY_LOWER: Final = {name.lower(): name for name in REASONS}
#: What ``-R`` says: no option of Slurm 22.05's sacct.
NO_SHORT_R: Final = (
    "Slurm 22.05's sacct has no -R (its man page names it, its sacct refuses it: "
    "\"invalid option -- 'R'\"): give --reason=LIST"
)


def parse_reasons(given: Iterable[str] | None) -> frozenset[str]:
    """``--reason``'s codes (comma lists, any case) in lower case; a ``ValueError`` for one
    Slurm 22.05 does not know, as its sacct refuses it."""
    codes: set[str] = set()
    for item in comma_list(given, "reason"):
        if item.lower() not in _BY_LOWER:
            raise ValueError(
                f"unrecognized job reason value {item!r}: Slurm 22.05's reason codes "
                "(Priority, Resources, Dependency, JobHeldUser, BeginTime, ReqNodeNotAvail, "
                "QOSMaxJobsPerUserLimit…; any case, the whole name)"
            )
        codes.add(item.lower())
    return frozenset(codes)


def reason_code(reason: str | None) -> str:
    """The code of a job's stored ``reason`` that ``--reason`` compares, in lower case:
    squeue's ``%r`` up to its first comma (``ReqNodeNotAvail, UnavailableNodes:n3`` →
    ``reqnodenotavail``)."""
    return slurm_reason(reason).split(",", 1)[0].strip().lower()
