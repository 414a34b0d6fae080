"""Probes in submissions: the request's ``liveness``/``readiness`` fields, fusesched YAML, and
Kubernetes ``livenessProbe``/``readinessProbe`` mapped onto them (named ports resolved, gRPC
warned about and left out); bad values refused with messages that name the field and line."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from fusesched.submit import SubmitError, parse_job_yaml, parse_kube_yaml, parse_request
from fusesched.submit.probes import LivenessProbe, Probe

WEB = """
name: web
resources: {cpu: 1, memory: 1Gi}
command: python -m http.server 8080
ports: [8080]
liveness:
  http: {port: 8080, path: /healthz}
  initial_delay_s: 5
  period_s: 2
  failure_threshold: 4
readiness:
  tcp: {port: 8080}
  success_threshold: 2
"""


def test_yaml_probes_at_the_top_level_of_a_one_group_job() -> None:
    (job,) = parse_job_yaml(WEB)
    group = job.groups[0]
    assert group.liveness == LivenessProbe(
        http={"port": 8080, "path": "/healthz"},
        initial_delay_s=5,
        period_s=2,
        failure_threshold=4,
    )
    assert group.readiness == Probe(tcp={"port": 8080}, success_threshold=2)
    assert group.liveness is not None and group.liveness.timeout_s == 1.0  # the defaults
    assert group.readiness is not None and group.readiness.period_s == 10.0
    assert group.liveness.describe() == "GET http://127.0.0.1:8080/healthz"


def test_a_request_without_probes_stores_as_before() -> None:
    (job,) = parse_job_yaml("resources: {cpu: 1}\ncommand: [sleep, '1']\n")
    assert "liveness" not in job.to_json() and "readiness" not in job.to_json()
    (probed,) = parse_job_yaml(WEB)
    assert type(probed).from_json(probed.to_json()) == probed


def test_an_exec_probe_in_a_group() -> None:
    text = (
        "groups:\n  - name: db\n    resources: {cpu: 1}\n    command: postgres\n"
        "    readiness: {exec: [pg_isready, -q], timeout_s: 3}\n"
    )
    (job,) = parse_job_yaml(text)
    assert job.groups[0].readiness == Probe(exec=["pg_isready", "-q"], timeout_s=3)


BAD_YAML = [
    ("liveness: {http: {port: 8080}, tcp: {port: 8080}}", 6, "liveness", "exactly one check"),
    ("liveness: {period_s: 5}", 6, "liveness", "exec: [argv]; none given"),
    ("readiness: {tcp: {port: 0}}", 6, "readiness.tcp.port", "greater than or equal to 1"),
    ("readiness: {http: {port: 80, path: 'a b'}}", 6, "readiness.http.path", "must start with /"),
    ("readiness: {exec: ['']}", 6, "readiness.exec", "exec[0]) must not be empty"),
    ("readiness:\n  exec: [x]\n  period_s: 7200", 8, "readiness.period_s", "less than or equal"),
    ("readiness:\n  exec: [x]\n  initial_delay_s: -1", 8, "readiness.initial_delay_s", ">= 0"),
    ("liveness:\n  exec: [x]\n  success_threshold: 2", 8, "liveness.success_threshold", "be 1"),
    ("liveness:\n  exec: [x]\n  failure_threshold: 1001", 8, "liveness.failure_threshold", "1000"),
    ("liveness:\n  exec: [x]\n  timeout_s: .nan", 8, "liveness.timeout_s", "finite number"),
    ("liveness:\n  exec: [x]\n  grpc: {port: 1}", 8, "liveness.grpc", "unknown field 'grpc'"),
]


@pytest.mark.parametrize(("probe", "line", "field", "said"), BAD_YAML)
def test_bad_probe_values_are_refused(probe: str, line: int, field: str, said: str) -> None:
    text = "name: web\nresources: {cpu: 1}\ncommand: [sleep, '60']\nports: [80]\n\n" + probe + "\n"
    with pytest.raises(SubmitError) as caught:
        parse_job_yaml(text, "web.yaml")
    message = str(caught.value).replace("greater than or equal to 0", ">= 0")
    assert message.startswith(f"web.yaml:{line}: {field}: "), message
    assert said in message, message


def test_the_api_model_refuses_the_same() -> None:
    group = {"resources": {"cpu": 1}, "argv": ["x"], "liveness": {"tcp": {"port": 1}}}
    assert parse_request({"groups": [group]}).groups[0].liveness is not None
    group["readiness"] = {"http": {"port": 8080}, "timeout_s": 0}
    with pytest.raises(SubmitError, match=r"groups\[0\]\.readiness\.timeout_s"):
        parse_request({"groups": [group]})


POD = """apiVersion: v1
kind: Pod
metadata: {name: web}
spec:
  schedulerName: fused-scheduler
  containers:
    - name: web
      image: /images/web.tar
      command: [python, -m, http.server, "8080"]
      ports:
        - {name: http, containerPort: 8080}
      resources: {requests: {cpu: 1}}
      livenessProbe:
        httpGet: {path: /healthz, port: http}
        initialDelaySeconds: 15
        periodSeconds: 20
        timeoutSeconds: 2
        failureThreshold: 5
        successThreshold: 1
      readinessProbe:
        tcpSocket: {port: 8080}
        periodSeconds: 5
        successThreshold: 2
"""


def test_kube_probes_map_to_the_group() -> None:
    (parsed,) = parse_kube_yaml(POD, "p.yaml")
    assert parsed.warnings == ()
    group = parsed.request.groups[0]
    assert group.liveness == LivenessProbe(
        http={"port": 8080, "path": "/healthz"},
        initial_delay_s=15,
        period_s=20,
        timeout_s=2,
        failure_threshold=5,
    )
    assert group.readiness == Probe(tcp={"port": 8080}, period_s=5, success_threshold=2)


def test_a_kube_exec_probe_and_the_defaults() -> None:
    text = POD.replace(
        "        httpGet: {path: /healthz, port: http}\n",
        "        exec: {command: [cat, /tmp/ok]}\n",
    )
    for line in ("initialDelaySeconds: 15", "periodSeconds: 20", "timeoutSeconds: 2"):
        text = text.replace(f"        {line}\n", "")
    text = text.replace("        failureThreshold: 5\n        successThreshold: 1\n", "")
    (parsed,) = parse_kube_yaml(text)
    assert parsed.request.groups[0].liveness == LivenessProbe(exec=["cat", "/tmp/ok"])


def test_grpc_and_startup_probes_and_ignored_parts_warn() -> None:
    text = POD.replace("        tcpSocket: {port: 8080}\n", "        grpc: {port: 9090}\n").replace(
        "        httpGet: {path: /healthz, port: http}\n",
        "        httpGet: {path: /healthz, port: http, host: web.example, httpHeaders: []}\n"
        "        terminationGracePeriodSeconds: 3\n",
    )
    text += "      startupProbe: {tcpSocket: {port: 8080}}\n"
    (parsed,) = parse_kube_yaml(text, "p.yaml")
    group = parsed.request.groups[0]
    assert group.readiness is None and group.liveness is not None
    assert parsed.warnings == (
        "p.yaml:25: spec.containers[0].startupProbe is not supported; ignored",
        "p.yaml:15: spec.containers[0].livenessProbe.terminationGracePeriodSeconds is not "
        "supported; ignored",
        "p.yaml:14: spec.containers[0].livenessProbe.httpGet.httpHeaders is not supported; ignored",
        "p.yaml:14: spec.containers[0].livenessProbe.httpGet.host 'web.example' is ignored: "
        "fusesched probes the task at 127.0.0.1 on its node",
        "p.yaml:22: spec.containers[0].readinessProbe.grpc: gRPC probes are not supported; the "
        "probe is ignored (give httpGet, tcpSocket or exec)",
    )


BAD_KUBE = [
    (
        ("port: http}", "port: metrics}"),
        "p.yaml:14: spec.containers[0].livenessProbe.httpGet.port: port 'metrics' names no "
        "containerPort of this container (named ports: http)",
    ),
    (
        ("port: http}", "port: http, scheme: HTTPS}"),
        "p.yaml:14: spec.containers[0].livenessProbe.httpGet.scheme: scheme 'HTTPS' is not "
        "supported: fusesched probes plain HTTP",
    ),
    (
        ("        periodSeconds: 5\n", "        periodSeconds: 5\n        exec: {command: [x]}\n"),
        "p.yaml:20: spec.containers[0].readinessProbe: a probe needs exactly one of exec, "
        "httpGet or tcpSocket; exec and tcpSocket given",
    ),
    (
        ("        successThreshold: 1\n", "        successThreshold: 3\n"),
        "p.yaml:19: spec.containers[0].livenessProbe.successThreshold: a liveness probe's "
        "success_threshold must be 1, not 3 (one success shows the task is alive)",
    ),
    (
        ("        timeoutSeconds: 2\n", "        timeoutSeconds: 0\n"),
        "p.yaml:17: spec.containers[0].livenessProbe.timeoutSeconds: Input should be greater "
        "than or equal to 0.1",
    ),
    (
        ("        failureThreshold: 5\n", "        failureTreshold: 5\n"),
        "p.yaml:18: spec.containers[0].livenessProbe.failureTreshold: unknown field "
        "'failureTreshold'; did you mean 'failureThreshold'?",
    ),
    (
        ("tcpSocket: {port: 8080}", "tcpSocket: {port: 99999}"),
        "p.yaml:21: spec.containers[0].readinessProbe.tcpSocket.port: Input should be less "
        "than or equal to 65535",
    ),
    (
        ("tcpSocket: {port: 8080}", "exec: {command: []}"),
        "p.yaml:21: spec.containers[0].readinessProbe.exec: exec needs command, a non-empty list",
    ),
    (
        ("tcpSocket: {port: 8080}", "tcpSocket: {port: 8080, host: [a]}"),
        "p.yaml:21: spec.containers[0].readinessProbe.tcpSocket.host: host must be a string",
    ),
    (  # digits other than ASCII's are no number
        ("tcpSocket: {port: 8080}", "tcpSocket: {port: '\uff18\uff10'}"),
        "p.yaml:21: spec.containers[0].readinessProbe.tcpSocket.port: port '\uff18\uff10' names "
        "no containerPort of this container (named ports: http)",
    ),
    (
        ("tcpSocket: {port: 8080}", "exec: {command: [check, --quiet, null]}"),
        "p.yaml:21: spec.containers[0].readinessProbe.exec.command[2]: Input should be a valid "
        "string",
    ),
]


@pytest.mark.parametrize(("change", "message"), BAD_KUBE)
def test_bad_kube_probes_are_refused(change: tuple[str, str], message: str) -> None:
    old, new = change
    assert old in POD
    with pytest.raises(SubmitError) as caught:
        parse_kube_yaml(POD.replace(old, new), "p.yaml")
    assert str(caught.value) == message


def test_the_example_in_the_docs() -> None:
    doc = (Path(__file__).resolve().parents[2] / "docs" / "SUBMIT.md").read_text()
    section = doc.split("## Probes: liveness and readiness", 1)[1].split("\n## ", 1)[0]
    (example,) = re.findall(r"```\n(.*?)```", section, re.DOTALL)
    (job,) = parse_job_yaml(example)
    group = job.groups[0]
    assert group.liveness is not None and group.liveness.http is not None
    assert (group.liveness.http.path, group.liveness.initial_delay_s) == ("/healthz", 5)
    assert group.readiness == Probe(tcp={"port": 8080}, period_s=2)
    assert job.restart.mode == "restart-in-place"
