"""The options ``fusesched controller`` and ``fusesched up`` share (the cluster's tenancy,
licenses, pools, power saving, InactiveLimit, terminals, job notifications and retention),
and the reading of their files and values: a bad one is a clear error, exit 2
(:mod:`fusesched.cli.servers` runs the commands)."""

from __future__ import annotations

import math
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

if TYPE_CHECKING:
    from fusesched.backends.federation_config import FederationConfig
    from fusesched.controller.notify_send import NotifyConfig
    from fusesched.controller.power import PowerConfig
    from fusesched.policies.tenancy_policy import TenancyPolicy

from fusesched.cli.live import _fail
from fusesched.controller.inactive import MAX_INACTIVE_LIMIT_S

TenancyOpt = Annotated[
    Path | None,
    typer.Option(
        help="Tenancy configuration (YAML): organisations, tenants, queues with quotas, "
        "cohorts, QoS tiers and a `scheduling:` section (docs/TENANCY.md). Edited, it is "
        "re-read and applied without a restart by `fusesched reconfigure` or SIGHUP."
    ),
]


LicensesOpt = Annotated[
    str | None,
    typer.Option(
        "--licenses",
        help="The cluster's floating licenses, NAME:COUNT[,NAME:COUNT…] (matlab:10,ansys:4): "
        "jobs ask for them with sbatch -L and wait until they are free (docs/LICENSES.md); "
        "`fusesched reconfigure --licenses` changes them while it runs.",
    ),
]


def load_licenses(text: str | None) -> tuple[tuple[str, int], ...]:
    """``--licenses``'s pairs; a malformed list exits 2 with the reason."""
    from fusesched.model.licenses import LicenseError, parse_licenses

    if text is None:
        return ()
    try:
        return parse_licenses(text)
    except LicenseError as exc:
        _fail(f"--licenses: {exc}", 2)


PoolsOpt = Annotated[
    Path | None,
    typer.Option(
        "--pools",
        help="Federation file (YAML): pools (local agents, Slurm and Kubernetes clusters) and "
        "the rules that route jobs to them (docs/FEDERATION.md).",
    ),
]


PowerOpt = Annotated[
    Path | None,
    typer.Option(
        "--power",
        help="Power saving (YAML): suspend and resume command templates, the policy "
        "(idle-timeout, predictive, surge, forecast, always-on), idle threshold, rates, warm "
        "reserve, exclusions (docs/ENERGY.md).",
    ),
]


def load_power(path: Path | None) -> PowerConfig | None:
    """The power-saving settings in ``path`` (None: none); a clear error, exit 2, if bad."""
    if path is None:
        return None
    from fusesched.controller.power import PowerConfig

    try:
        return PowerConfig.load(path)
    except ValueError as exc:
        _fail(str(exc), 2)


InactiveLimitOpt = Annotated[
    int,
    typer.Option(
        "--inactive-limit",
        min=0,
        max=MAX_INACTIVE_LIMIT_S,
        metavar="SECONDS",
        help="Slurm's InactiveLimit: end an allocation whose `fusesched salloc` or `fusesched "
        "run` has not answered for this many seconds (killed, its host lost, or suspended "
        "with Ctrl-Z): a running job ends TIMEOUT with the reason InactiveLimit, a waiting "
        "one is cancelled. Batch jobs are never ended by it. 0 turns it off (Slurm's "
        "default); 300 by default, so that an abandoned allocation gives its nodes back to "
        "the shared pool within minutes; at most 65533 (as Slurm's) (docs/LIVE.md).",
    ),
]
PtySessionsOpt = Annotated[
    int,
    typer.Option(
        "--pty-sessions-per-user",
        min=1,
        metavar="N",
        help="The most open terminals of one user, admins too (`fusesched run --pty` jobs, "
        "`srun --pty` steps, waiting or running; each holds up to 320 KiB of the "
        "controller's memory): one more is refused (400) (docs/SUBMIT.md).",
    ),
]


PurgeAfterOpt = Annotated[
    str | None,
    typer.Option(
        "--purge-after",
        metavar="AGE",
        help="Retention: about once an hour, remove the records of the jobs that ended more "
        "than AGE ago (90d, 12h, 2w), as Slurm's PurgeJobAfter and `fusesched purge` "
        '(docs/DEPLOY.md, "Retention"); off by default. With --tenancy it must be at '
        "least fair share's window (20 half-lives: 140d for the default 7d).",
    ),
]


def purge_after(text: str | None, tenancy: TenancyPolicy | None) -> float | None:
    """``--purge-after``'s seconds (None: off); exit 2 when it is no age, or shorter than the
    window of runs fair share reads back after a restart (the purge would erase them)."""
    if text is None:
        return None
    from fusesched.cli.purge import parse_age
    from fusesched.core.past_usage import RECALLED_HALF_LIVES

    try:
        seconds = parse_age(text, "--purge-after")
    except ValueError as exc:
        _fail(str(exc), 2)
    if tenancy is not None and math.isinf(tenancy.half_life_s):
        _fail(
            "--purge-after: fair share reads back every ended run (its half_life_s is "
            "infinite), so no automatic purge can leave its usage alone",
            2,
        )
    if tenancy is not None and seconds < RECALLED_HALF_LIVES * tenancy.half_life_s:
        window = RECALLED_HALF_LIVES * tenancy.half_life_s
        _fail(
            f"--purge-after {text} is shorter than the usage fair share reads back after a "
            f"restart ({RECALLED_HALF_LIVES} half-lives of {tenancy.half_life_s:g} s: "
            f"{window / 86400:g} days): give at least that, or purge younger jobs by hand "
            "(`fusesched purge --force`)",
            2,
        )
    return seconds


# job-notification options, of `controller` and `up` alike
SmtpOpt = Annotated[
    str | None,
    typer.Option(
        "--smtp",
        metavar="HOST[:PORT]",
        help="Mail server for job notifications (sbatch --mail-type, the job field "
        "notify); port 25 by default. Without it (and without --notify-webhook) no "
        "notification is sent.",
    ),
]
MailFromOpt = Annotated[
    str,
    typer.Option(
        "--mail-from",
        help="Sender of notification mails (default fusesched@HOSTNAME, this host's name).",
    ),
]
MailDomainOpt = Annotated[
    str,
    typer.Option(
        "--mail-domain",
        help="Domain added to a bare user name (the default recipient is the job's user): "
        "alice → alice@DOMAIN, as Slurm's MailDomain.",
    ),
]
StartTlsOpt = Annotated[
    bool, typer.Option("--smtp-starttls", help="Upgrade the SMTP connection with STARTTLS.")
]
SmtpUserOpt = Annotated[
    str | None,
    typer.Option(
        "--smtp-user",
        help="Log in to the mail server as this user; the password is read from "
        "$FUSESCHED_SMTP_PASSWORD.",
    ),
]
WebhookOpt = Annotated[
    str | None,
    typer.Option(
        "--notify-webhook",
        metavar="URL",
        help="POST each job notification as JSON to this http(s) URL (docs/LIVE.md).",
    ),
]


def notify_config(
    smtp: str | None,
    mail_from: str,
    mail_domain: str,
    starttls: bool,
    smtp_user: str | None,
    webhook: str | None,
) -> NotifyConfig | None:
    """The job-notification settings of the controller's options (None: no transport and no
    option given); a clear error, exit 2, for bad ones. The SMTP password is read from
    $FUSESCHED_SMTP_PASSWORD, never from an option."""
    import os

    from fusesched.controller.notify_send import PASSWORD_ENV, NotifyConfig

    given = smtp is not None or webhook is not None or starttls or smtp_user is not None
    if not given and not (mail_from or mail_domain):
        return None
    if smtp is None and mail_from:
        _fail("--mail-from needs --smtp HOST:PORT", 2)
    if smtp is None and webhook is None and mail_domain:
        _fail("--mail-domain needs --smtp HOST:PORT or --notify-webhook URL", 2)
    try:
        return NotifyConfig(
            smtp=smtp,
            mail_from=mail_from,
            mail_domain=mail_domain,
            starttls=starttls,
            smtp_user=smtp_user,
            smtp_password=os.environ.get(PASSWORD_ENV) if smtp_user is not None else None,
            webhook=webhook,
        )
    except ValueError as exc:
        _fail(str(exc), 2)


def load_federation(path: Path | None) -> FederationConfig | None:
    """The pools and routing rules in ``path`` (None: none); a clear error, exit 2, if bad."""
    if path is None:
        return None
    from fusesched.backends.federation_config import FederationError, load_federation

    try:
        return load_federation(path)
    except FederationError as exc:  # unreadable files too
        _fail(str(exc), 2)


def load_tenancy(path: Path | None) -> TenancyPolicy | None:
    """The tenancy policy in ``path`` (None: none); a clear error and exit 2 if invalid (the
    same error `fusesched reconfigure` gives when the file is edited into an invalid one)."""
    if path is None:
        return None
    from fusesched.controller.reconfigure import TenancyFileError, read_tenancy_file

    try:
        return read_tenancy_file(path)
    except TenancyFileError as exc:
        _fail(str(exc), 2)
