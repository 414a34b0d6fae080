"""Job event notifications as submitted: ``sbatch --mail-type``/``--mail-user``, the YAML and
REST field ``notify``, the Kubernetes annotation ``fusesched.io/notify``, and the checks on
mail addresses."""

from __future__ import annotations

import pytest

from fusesched.submit.errors import SubmitError
from fusesched.submit.job_notify import NotifyEvent, NotifyRequest, mail_address, stored_mail
from fusesched.submit.kube import parse_kube_yaml
from fusesched.submit.request import JobRequest, parse_request
from fusesched.submit.sbatch import parse_sbatch
from fusesched.submit.yaml_spec import parse_job_yaml

SCRIPT = "#!/bin/bash\n{directives}\nsleep 1\n"
B, E, F, R, D = (
    NotifyEvent.BEGIN,
    NotifyEvent.END,
    NotifyEvent.FAIL,
    NotifyEvent.REQUEUE,
    NotifyEvent.INVALID_DEPEND,
)


def _sbatch(*directives: str, args: tuple[str, ...] = ()) -> tuple[JobRequest, tuple[str, ...]]:
    parsed = parse_sbatch(SCRIPT.format(directives="\n".join(directives)), args=list(args))
    return parsed.request, parsed.warnings


@pytest.mark.parametrize(
    ("mail_type", "events", "array_tasks"),
    [
        ("BEGIN,END", [B, E], False),
        ("end,fail", [E, F], False),
        ("ALL", [B, E, F, R, D], False),
        ("FAIL,ALL,ARRAY_TASKS", [B, E, F, R, D], True),
        ("TIME_LIMIT_50,TIME_LIMIT_80,TIME_LIMIT_90,TIME_LIMIT", list(NotifyEvent)[5:], False),
        ("REQUEUE,INVALID_DEPEND", [R, D], False),
    ],
)
def test_mail_types(mail_type: str, events: list[NotifyEvent], array_tasks: bool) -> None:
    request, warnings = _sbatch(f"#SBATCH --mail-type={mail_type}")
    assert request.notify == NotifyRequest(events=events, array_tasks=array_tasks)
    assert request.notify.to == ""  # the job's user, filled in by the controller
    assert warnings == ()


def test_mail_user_and_the_command_line_overriding_the_script() -> None:
    request, _ = _sbatch(
        "#SBATCH --mail-type=END --mail-user=a@example.org",
        args=("--mail-type=BEGIN,FAIL",),
    )
    assert request.notify == NotifyRequest(events=[B, F], to="a@example.org")
    request, _ = _sbatch("#SBATCH --mail-type=END", args=("--mail-user", "bob"))
    assert request.notify is not None and request.notify.to == "bob"
    request, _ = _sbatch("#SBATCH --mail-type=END", args=("--mail-type=NONE",))
    assert request.notify is None
    stored = JobRequest.from_json(_sbatch("#SBATCH --mail-type=END,ARRAY_TASKS")[0].to_json())
    assert stored.notify == NotifyRequest(events=[E], array_tasks=True)


def test_what_is_dropped_says_so() -> None:
    request, warnings = _sbatch("#SBATCH --mail-type=END,STAGE_OUT")
    assert request.notify == NotifyRequest(events=[E])
    assert warnings == ("<script>:2: --mail-type STAGE_OUT is not supported; ignored",)
    request, warnings = _sbatch("#SBATCH --mail-user=a@example.org")
    assert request.notify is None
    assert warnings == ("<script>:2: --mail-user without --mail-type: no mail is sent",)
    request, warnings = _sbatch("#SBATCH --mail-type=ARRAY_TASKS")
    assert request.notify is None and "names no event" in warnings[0]


@pytest.mark.parametrize(
    ("directive", "message"),
    [
        ("--mail-type=BEGINN", "script>:2: --mail-type: unknown mail type 'BEGINN'"),
        ("--mail-type=NONE,END", "NONE cannot be combined"),
        ("--mail-type=,", "no mail type given"),
        ("--mail-type=END --mail-user=a@b@c", "not a valid mail name"),
        ("--mail-type=END --mail-user=a,b@x.org", "one mail address"),
        ("--mail-type=END --mail-user=me@-lab.org", "not a valid host name"),
        ("--mail-type=END --mail-user=@lab.org", "not a valid mail name"),
        ("--mail-type=END --mail-user=me@", "not a valid host name"),
        ("--mail-type=END --mail-user=$(reboot)", "neither a mail address"),
    ],
)
def test_bad_mail_options_are_refused(directive: str, message: str) -> None:
    with pytest.raises(SubmitError, match=message.replace("(", r"\(").replace("$", r"\$")):
        _sbatch(f"#SBATCH {directive}")


@pytest.mark.parametrize(
    "address", ["a@example.org", "first.last+tag@sub.lab-1.org", "alice", "root@localhost"]
)
def test_good_addresses(address: str) -> None:
    assert mail_address(address) == address


@pytest.mark.parametrize(
    "address",
    ["", "a..b@x.org", "a@x..org", "a@x.org\r\nBcc: b@y.org", "<a@x.org>", "a" * 250 + "@x.org"],
)
def test_bad_addresses(address: str) -> None:
    with pytest.raises(ValueError):
        mail_address(address)


def test_yaml_field() -> None:
    (request,) = parse_job_yaml(
        "name: t\ncommand: sleep 1\nresources: {cpu: 1}\n"
        "notify:\n  events: [begin, END, time_limit_80]\n  to: me@lab.org\n"
    )
    assert request.notify == NotifyRequest(
        events=[B, E, NotifyEvent.TIME_LIMIT_80], to="me@lab.org"
    )
    (short,) = parse_job_yaml("command: sleep 1\nresources: {cpu: 1}\nnotify: END,FAIL\n")
    assert short.notify == NotifyRequest(events=[E, F])


@pytest.mark.parametrize(
    ("notify", "message"),
    [
        ("{events: [stage_out]}", "STAGE_OUT: not supported"),
        ("{events: []}", "no mail type given"),
        ("{events: [none]}", "at least one event"),
        ("{events: [end], to: 'x y'}", "one mail address"),
        ("{events: [end], cc: x@y.org}", "cc"),
        ("{events: [ended]}", "unknown mail type 'ENDED'"),
    ],
)
def test_bad_yaml_field_names_the_line(notify: str, message: str) -> None:
    text = f"command: sleep 1\nresources: {{cpu: 1}}\nnotify: {notify}\n"
    with pytest.raises(SubmitError, match=message) as caught:
        parse_job_yaml(text, source="job.yaml")
    assert "job.yaml:3" in str(caught.value)


def test_kubernetes_annotation() -> None:
    (parsed,) = parse_kube_yaml(
        "apiVersion: v1\nkind: Pod\nmetadata:\n  name: p\n  annotations:\n"
        "    fusesched.io/notify: END,FAIL\nspec:\n  schedulerName: fused-scheduler\n"
        "  containers:\n  - name: c\n    image: /images/base\n    command: [sleep, '1']\n"
        "    resources: {requests: {cpu: 1}}\n"
    )
    assert parsed.request.notify == NotifyRequest(events=[E, F])


def test_rest_form_round_trips_and_old_requests_have_none() -> None:
    base = {"groups": [{"resources": {"cpu": 1}, "argv": ["x"]}]}
    assert parse_request(base).notify is None  # stored before notify existed
    request = parse_request({**base, "notify": {"events": ["fail"], "to": "a@b.org"}})
    assert JobRequest.from_json(request.to_json()) == request
    assert request.notify is not None and request.notify.describe() == "FAIL"
    # as job views show it (scontrol's MailType, MailUser)
    assert stored_mail({"events": ["end", "begin"], "array_tasks": True}, "bob") == (
        "BEGIN,END,ARRAY_TASKS",
        "bob",
    )
    assert stored_mail(None, "bob") == (None, None)
    assert stored_mail({"events": ["bogus"]}, "bob") == (None, None)
