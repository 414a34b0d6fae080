"""A Kubernetes container's ``livenessProbe`` and ``readinessProbe`` as the group's
``liveness`` and ``readiness`` (:mod:`fusesched.submit.probes`; docs/SUBMIT.md has the table).

* ``httpGet`` (``path``, ``port``) → ``http``; ``tcpSocket`` (``port``) → ``tcp``;
  ``exec.command`` → ``exec``. A named port is the ``containerPort`` of that name in the
  container's ``ports``; a name none has is refused. ``scheme: HTTPS`` is refused (probes are
  plain HTTP); ``host`` and ``httpHeaders`` are ignored with a warning (probes go to
  127.0.0.1);
* ``grpc`` is not supported: a warning, and the probe is left out;
* ``initialDelaySeconds``, ``periodSeconds``, ``timeoutSeconds``, ``failureThreshold``,
  ``successThreshold`` → ``initial_delay_s``, ``period_s``, ``timeout_s``,
  ``failure_threshold``, ``success_threshold`` (the request validates them; its errors name
  the Kubernetes field); ``terminationGracePeriodSeconds`` is ignored with a warning.
"""

from __future__ import annotations

import difflib
from collections.abc import Mapping
from typing import Final, Protocol

from fusesched.submit._yamldoc import Document
from fusesched.submit.errors import SubmitError
from fusesched.submit.problems import Loc, format_loc

#: Kubernetes probe → the group field it becomes.
PROBES: Final = {"livenessProbe": "liveness", "readinessProbe": "readiness"}
HANDLERS: Final = ("exec", "httpGet", "tcpSocket", "grpc")
TIMING: Final = {
    "initialDelaySeconds": "initial_delay_s",
    "periodSeconds": "period_s",
    "timeoutSeconds": "timeout_s",
    "failureThreshold": "failure_threshold",
    "successThreshold": "success_threshold",
}
IGNORED: Final = frozenset({"terminationGracePeriodSeconds"})
_LOCAL_HOSTS: Final = frozenset({"127.0.0.1", "localhost", "::1"})


class Reader(Protocol):
    """What of the Kubernetes reader (:mod:`fusesched.submit.kube`) the mapping uses."""

    doc: Document
    renames: dict[str, Loc]

    def error(self, message: str, loc: Loc) -> SubmitError: ...
    def warn(self, message: str, loc: Loc) -> None: ...


def add_probes(
    reader: Reader,
    container: Mapping[str, object],
    loc: Loc,
    group: dict[str, object],
    prefix: str = "groups[0]",
) -> None:
    """Put the container's (at ``loc``) probes in ``group`` (the request's ``prefix``, as
    ``groups[1]``)."""
    ports = _named_ports(container)
    for kube_key, field in PROBES.items():
        if kube_key not in container:
            continue
        probe_loc: Loc = (*loc, kube_key)
        probe = _Probe(reader, probe_loc, f"{prefix}.{field}", ports).read(container[kube_key])
        if probe is not None:
            group[field] = probe
            reader.renames[f"{prefix}.{field}"] = probe_loc


def _named_ports(container: Mapping[str, object]) -> dict[str, object]:
    out: dict[str, object] = {}
    ports = container.get("ports")
    for entry in ports if isinstance(ports, list) else []:
        if isinstance(entry, Mapping) and isinstance(entry.get("name"), str):
            out[str(entry["name"])] = entry.get("containerPort")
    return out


class _Probe:
    """One Kubernetes probe at ``loc``, becoming the request field ``field``."""

    def __init__(self, reader: Reader, loc: Loc, field: str, ports: dict[str, object]) -> None:
        self.reader = reader
        self.loc = loc
        self.field = field
        self.ports = ports

    def mapping(self, value: object, loc: Loc, what: str) -> Mapping[str, object]:
        if not isinstance(value, Mapping):
            raise self.reader.error(f"{what} must be a mapping", loc)
        return {str(k): v for k, v in value.items()}

    def read(self, value: object) -> dict[str, object] | None:
        """The request's probe (None: a gRPC probe, left out with a warning)."""
        reader, loc = self.reader, self.loc
        probe = self.mapping(value, loc, "a probe")
        known = {*HANDLERS, *TIMING, *IGNORED}
        for key in probe:
            if key in IGNORED:
                reader.warn(f"{format_loc((*loc, key))} is not supported; ignored", (*loc, key))
            elif key not in known:
                close = difflib.get_close_matches(key, sorted(known), n=1)
                hint = f"; did you mean {close[0]!r}?" if close else ""
                raise reader.error(f"unknown field {key!r}{hint}", (*loc, key))
        handlers = [key for key in HANDLERS if key in probe]
        if len(handlers) != 1:
            said = "none" if not handlers else " and ".join(handlers)
            raise reader.error(
                f"a probe needs exactly one of exec, httpGet or tcpSocket; {said} given", loc
            )
        (handler,) = handlers
        if handler == "grpc":
            reader.warn(
                f"{format_loc((*loc, 'grpc'))}: gRPC probes are not supported; the probe is "
                "ignored (give httpGet, tcpSocket or exec)",
                (*loc, "grpc"),
            )
            return None
        out: dict[str, object] = {}
        for kube_key, key in TIMING.items():
            if kube_key in probe:
                out[key] = probe[kube_key]
                reader.renames[f"{self.field}.{key}"] = (*loc, kube_key)
        if handler == "exec":
            out["exec"] = self.command(probe["exec"], (*loc, "exec"))
        elif handler == "httpGet":
            out["http"] = self.http_get(probe["httpGet"], (*loc, "httpGet"))
        else:
            out["tcp"] = self.tcp_socket(probe["tcpSocket"], (*loc, "tcpSocket"))
        return out

    def command(self, value: object, loc: Loc) -> list[object]:
        handler = self.mapping(value, loc, "exec")
        for key in handler:
            if key != "command":
                raise self.reader.error(f"unknown field {key!r} (exec takes command)", (*loc, key))
        command = handler.get("command")
        if not isinstance(command, list) or not command:
            raise self.reader.error("exec needs command, a non-empty list", loc)
        self.reader.renames[f"{self.field}.exec"] = (*loc, "command")
        for index in range(len(command)):  # (an error names the word)
            self.reader.renames[f"{self.field}.exec[{index}]"] = (*loc, "command", index)
        return [
            str(w) if isinstance(w, int | float) and not isinstance(w, bool) else w for w in command
        ]

    def http_get(self, value: object, loc: Loc) -> dict[str, object]:
        handler = self.mapping(value, loc, "httpGet")
        self.fields(handler, loc, {"path", "port", "host", "scheme", "httpHeaders"})
        scheme = handler.get("scheme", "HTTP")
        if scheme != "HTTP":
            raise self.reader.error(
                f"scheme {scheme!r} is not supported: fusesched probes plain HTTP",
                (*loc, "scheme"),
            )
        if "httpHeaders" in handler:
            self.reader.warn(
                f"{format_loc((*loc, 'httpHeaders'))} is not supported; ignored",
                (*loc, "httpHeaders"),
            )
        self.host(handler, loc)
        out: dict[str, object] = {"port": self.port(handler, loc)}
        if "path" in handler:
            out["path"] = handler["path"]
            self.reader.renames[f"{self.field}.http.path"] = (*loc, "path")
        self.reader.renames[f"{self.field}.http"] = loc
        return out

    def tcp_socket(self, value: object, loc: Loc) -> dict[str, object]:
        handler = self.mapping(value, loc, "tcpSocket")
        self.fields(handler, loc, {"port", "host"})
        self.host(handler, loc)
        self.reader.renames[f"{self.field}.tcp"] = loc
        return {"port": self.port(handler, loc)}

    def fields(self, handler: Mapping[str, object], loc: Loc, known: set[str]) -> None:
        for key in handler:
            if key not in known:
                close = difflib.get_close_matches(key, sorted(known), n=1)
                hint = f"; did you mean {close[0]!r}?" if close else ""
                raise self.reader.error(f"unknown field {key!r}{hint}", (*loc, key))

    def host(self, handler: Mapping[str, object], loc: Loc) -> None:
        host = handler.get("host")
        if host is not None and not isinstance(host, str):
            raise self.reader.error("host must be a string", (*loc, "host"))
        if host is not None and host not in _LOCAL_HOSTS:
            self.reader.warn(
                f"{format_loc((*loc, 'host'))} {host!r} is ignored: fusesched probes the "
                "task at 127.0.0.1 on its node",
                (*loc, "host"),
            )

    def port(self, handler: Mapping[str, object], loc: Loc) -> object:
        """The port number: as given, or the ``containerPort`` a name stands for."""
        port_loc: Loc = (*loc, "port")
        if "port" not in handler:
            raise self.reader.error("a probe needs port", loc)
        port = handler["port"]
        self.reader.renames[f"{self.field}.{'http' if loc[-1] == 'httpGet' else 'tcp'}.port"] = (
            port_loc
        )
        if not isinstance(port, str) or (port.isascii() and port.isdigit()):
            return int(port) if isinstance(port, str) else port
        if port not in self.ports:
            named = ", ".join(sorted(self.ports)) or "none"
            raise self.reader.error(
                f"port {port!r} names no containerPort of this container (named ports: {named})",
                port_loc,
            )
        return self.ports[port]
