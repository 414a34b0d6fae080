"""One entry for every file format: a ``#!`` script is an ``#SBATCH`` batch script; otherwise
the text is YAML and each document is a Kubernetes object when it has an ``apiVersion`` other
than ``fusesched.io/v1``, else a fusesched job."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path

from fusesched.submit._yamldoc import load_documents
from fusesched.submit.errors import SubmitError, read_source
from fusesched.submit.job_signal import signal_warnings
from fusesched.submit.kube import job_from_kube, looks_like_kube
from fusesched.submit.request import JobRequest, ParsedJob
from fusesched.submit.sbatch import parse_sbatch
from fusesched.submit.yaml_spec import job_from_document


def parse_submission(
    text: str,
    *,
    source: str = "<string>",
    sbatch_args: Sequence[str] = (),
    now: float | None = None,
    submit_dir: str | None = None,
    submit_env: Mapping[str, str] | None = None,
) -> list[ParsedJob]:
    """Every job in ``text``, whatever its format (see the module); an empty ``text`` with
    ``sbatch_args`` is ``sbatch --wrap`` (no script file: the options say what runs).
    Relative begin times (``--begin=now+1hour``, ``begin: "16:00"``) are read against ``now``
    (None: this machine's clock; the controller passes its own). ``submit_dir``: the folder
    the submitting command runs in, and ``submit_env`` its environment, a batch script's
    (:func:`parse_sbatch`); others ignore them."""
    if text.startswith("#!") or (sbatch_args and not text.strip()):
        job = parse_sbatch(
            text,
            source=source,
            args=sbatch_args,
            now=now,
            submit_dir=submit_dir,
            submit_env=submit_env,
        )
        return [job]
    if sbatch_args:
        raise SubmitError(
            "sbatch options were given but the file is not a batch script (no #! line)",
            source=source,
        )
    docs = load_documents(text, source)
    if not docs:
        raise SubmitError("no job in the file (it is empty)", source=source)
    return [
        job_from_kube(doc) if looks_like_kube(doc.data) else _yaml_job(job_from_document(doc, now))
        for doc in docs
    ]


def _yaml_job(request: JobRequest) -> ParsedJob:
    return ParsedJob(request, tuple(signal_warnings(request.signal, request.walltime_s)))


def load_submission(
    path: str | Path,
    sbatch_args: Sequence[str] = (),
    now: float | None = None,
    submit_dir: str | None = None,
    submit_env: Mapping[str, str] | None = None,
) -> list[ParsedJob]:
    """:func:`parse_submission` on a file (errors name the file)."""
    text, name = read_source(path, "the file")
    return parse_submission(
        text,
        source=name,
        sbatch_args=sbatch_args,
        now=now,
        submit_dir=submit_dir,
        submit_env=submit_env,
    )
