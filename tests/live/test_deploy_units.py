"""The systemd units of deploy/systemd/, run as docs/DEPLOY.md says.

systemd is not PID 1 here, so the units cannot be started by it: the test reads them
(tests/live/systemd_units.py) and starts each one's ``ExecStart=`` as systemd would — in the
environment its ``EnvironmentFile=``s give, with its state folder made — under a scratch folder
that stands for ``/`` (the guide's /etc/fusesched, /var/lib/… are taken under it), with the
shipped environment files edited as an operator edits them. The processes run as this test's
user (root here), not as the controller unit's ``User=fusesched``; ``systemd-analyze verify``
checks the units themselves.
"""

from __future__ import annotations

import os
import shlex
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import httpx
import pytest

from fusesched.agent.config import load_config
from fusesched.tls import client_context

from .conftest import drop_postgres, fresh_postgres_url
from .systemd_units import (
    Unit,
    edit_env_file,
    exec_argv,
    parse_env_file,
    parse_unit,
    referenced,
    service_environment,
)
from .test_standby import free_port, wait_for

UNITS = Path(__file__).resolve().parents[2] / "deploy" / "systemd"
INSTALLED = "/opt/fusesched/bin/fusesched"  # where docs/DEPLOY.md installs the command
FUSESCHED = str(Path(sys.executable).with_name("fusesched"))  # this checkout's
SERVICE_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"  # systemd's
NODE = "deploy-node"


def unit(name: str) -> Unit:
    return parse_unit((UNITS / f"fusesched-{name}.service").read_text())


class Host:
    """A scratch folder standing for ``/`` of the head node and of a compute node (one
    machine here), and the units' processes started in it."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.procs: list[subprocess.Popen[bytes]] = []
        self.logs: list[Path] = []

    def path(self, path: str) -> Path:
        return self.root / path.lstrip("/")

    def install(self, name: str, changes: dict[str, str], mode: int = 0o600) -> None:
        """deploy/systemd/NAME as /etc/fusesched/NAME, with these settings changed and the
        other paths it names taken under the root."""
        shipped = (UNITS / name).read_text()
        paths = {k: v for k, v in parse_env_file(shipped).items() if v.startswith("/")}
        rooted = {k: str(self.path(v)) for k, v in paths.items()}
        target = self.path(f"/etc/fusesched/{name}")
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(edit_env_file(shipped, rooted | changes))
        target.chmod(mode)

    def start(self, name: str) -> subprocess.Popen[bytes]:
        """Start unit fusesched-NAME as systemd would: its state folder (with its mode), its
        environment and no other (systemd's PATH), its ``ExecStart=`` — the installed command
        being this checkout's."""
        service = unit(name)
        state = self.path(f"/var/lib/{service.value('Service', 'StateDirectory')}")
        state.mkdir(parents=True, exist_ok=True)
        state.chmod(int(service.value("Service", "StateDirectoryMode"), 8))
        env = {"PATH": SERVICE_PATH, "LANG": "C.UTF-8", **service_environment(service, self.root)}
        argv = exec_argv(service.value("Service", "ExecStart"), env)
        assert argv[0] == INSTALLED
        log = self.path(f"/var/log/{name}-{len(self.logs)}.log")
        log.parent.mkdir(parents=True, exist_ok=True)
        self.logs.append(log)
        with log.open("wb") as out:
            proc = subprocess.Popen([FUSESCHED, *argv[1:]], env=env, stdout=out, stderr=out)
        self.procs.append(proc)
        return proc

    def stop(self, name: str, proc: subprocess.Popen[bytes]) -> int:
        """``systemctl stop``: SIGTERM to the main process (the agent's KillMode=mixed: to it
        alone), then up to ``TimeoutStopSec=`` for it to exit; its exit status."""
        proc.send_signal(signal.SIGTERM)
        return proc.wait(timeout=float(unit(name).value("Service", "TimeoutStopSec")))

    def wait_for_line(self, proc: subprocess.Popen[bytes], text: str) -> None:
        """Until the process started last has logged ``text`` (its exit first is a failure)."""
        log = self.logs[-1]
        wait_for(lambda: text in log.read_text() or proc.poll() is not None, 30, text)
        assert proc.poll() is None, self.output()

    def output(self) -> str:
        return "\n".join(f"--- {log.name}\n{log.read_text()[-3000:]}" for log in self.logs)

    def kill_all(self) -> None:
        for proc in self.procs:
            if proc.poll() is None:
                proc.kill()
                proc.wait(timeout=10)


@pytest.fixture
def host(scratch: Path) -> Host:
    root = scratch / "root"
    root.mkdir()
    root.chmod(0o755)  # tasks' users must reach their folders under /var/lib/fusesched-agent
    return Host(root)


def cli(env: dict[str, str], *args: str, cwd: Path | None = None) -> str:
    """Run ``fusesched ARGS`` as a person on the head node; its standard output."""
    done = subprocess.run(
        [FUSESCHED, *args], env=env, cwd=cwd, capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, f"fusesched {shlex.join(args)}: {done.stdout}{done.stderr}"
    return done.stdout


def healthy(url: str, ca: Path) -> bool:
    try:
        return httpx.get(f"{url}/healthz", verify=client_context(ca) or True).status_code == 200
    except httpx.TransportError:
        return False


def gone(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    return False


def test_the_units_run_the_guide(host: Host, scratch: Path) -> None:
    """Certificates, the controller unit on PostgreSQL over TLS, the admin and join tokens, the
    agent unit joining with its token from join.env, a job through the CLI; then the agent
    stopped (its task ends with it, as KillMode=mixed expects) and started again without the
    join token: it comes back with its saved credential and runs the next job."""
    db = fresh_postgres_url()
    try:
        # 3. the CA, and the controller's certificate, installed in /etc/fusesched/tls
        ca_dir = host.path("/root/fusesched-ca")
        cli({"PATH": SERVICE_PATH}, "ca", "init", "--dir", str(ca_dir))
        issue = ["ca", "issue", "--dir", str(ca_dir), "--name", "controller"]
        cli({"PATH": SERVICE_PATH}, *issue, "--host", "127.0.0.1", "--host", "localhost")
        tls = host.path("/etc/fusesched/tls")
        tls.mkdir(parents=True)
        for name in ("ca.crt", "controller.crt", "controller.key"):
            shutil.copy2(ca_dir / name, tls / name)
        ca = tls / "ca.crt"

        # 4. the controller unit: PostgreSQL, TLS, the loopback only
        port = free_port()
        settings = {"FUSESCHED_DB": db, "FUSESCHED_HOST": "127.0.0.1", "FUSESCHED_PORT": str(port)}
        host.install("controller.env", settings)
        controller = host.start("controller")
        url = f"https://127.0.0.1:{port}"
        wait_for(lambda: healthy(url, ca) or controller.poll() is not None, 60, "controller")
        assert controller.poll() is None, host.output()

        # 5. the first cluster-admin token; 6. a join token for the node
        admin = host.path("/var/lib/fusesched/admin.token")
        assert admin.stat().st_mode & 0o777 == 0o600
        person = {
            "PATH": SERVICE_PATH,
            "HOME": str(scratch),
            "FUSESCHED_CONTROLLER": url,
            "FUSESCHED_CA": str(ca),
            "FUSESCHED_TOKEN": admin.read_text().strip(),
        }
        join = cli(person, "token", "create", "--join", "--node", NODE, "--expires", "600")
        join_token = join.strip()

        # 7. the agent unit, its token in join.env
        config = (UNITS / "agent.yaml").read_text().replace("/var/lib/", f"{host.root}/var/lib/")
        test_node = f"name: {NODE}\naddress: 127.0.0.1\ncpu: 2\nmemory: 2Gi\nnvml: false\n"
        host.path("/etc/fusesched/agent.yaml").write_text(config + test_node)
        host.install("agent.env", {"FUSESCHED_CONTROLLER": url}, mode=0o644)
        host.install("join.env", {"FUSESCHED_JOIN_TOKEN": join_token})
        agent = host.start("agent")
        credential = host.path("/var/lib/fusesched-agent/work/agent.token")
        host.wait_for_line(agent, f"agent {NODE} registered")
        assert join_token not in Path(f"/proc/{agent.pid}/cmdline").read_text()
        assert credential.stat().st_mode & 0o777 == 0o600

        # 8. checking: the node, a first job
        assert NODE in cli(person, "nodes")
        assert "hello from the units" in cli(
            person, "run", "-t", "1", "echo", "hello from the units"
        )

        # a job running when the agent is stopped ends with it
        wrap = "echo $$ > task.pid; exec sleep 600"
        cli(person, "sbatch", "--parsable", "-t", "10", "--wrap", wrap, cwd=scratch)
        pid_file = scratch / "task.pid"
        wait_for(lambda: pid_file.exists() and pid_file.read_text().strip() != "", 30, "task")
        task = int(pid_file.read_text())
        assert not gone(task)
        assert host.stop("agent", agent) == 0, host.output()
        assert gone(task)

        # the join token is spent: the agent comes back with its saved credential alone
        saved = credential.read_text()
        host.path("/etc/fusesched/join.env").unlink()
        agent = host.start("agent")
        host.wait_for_line(agent, f"agent {NODE} registered")
        assert "back again" in cli(person, "run", "-t", "1", "echo", "back again")
        assert credential.read_text() == saved

        assert host.stop("agent", agent) == 0, host.output()
        assert host.stop("controller", controller) == 0, host.output()
    finally:
        host.kill_all()
        drop_postgres(db)


def shipped_environment(service: Unit) -> dict[str, str]:
    """The unit's environment with the shipped files as they are."""
    env: dict[str, str] = {}
    for value in service.values("Service", "EnvironmentFile"):
        env.update(parse_env_file((UNITS / Path(value).name).read_text()))
    return env


@pytest.mark.parametrize("name", ["controller", "agent"])
def test_the_command_lines_take_their_settings_from_the_env_files(name: str) -> None:
    """Every variable an ``ExecStart=`` uses is set in the shipped files (only the lists of
    further options may be empty), and no secret is ever on a command line."""
    service = unit(name)
    command = service.value("Service", "ExecStart")
    env = shipped_environment(service)
    assert exec_argv(command, env)[:2] == [INSTALLED, name]
    for variable in referenced(command):
        assert env[variable] or variable.endswith("_OPTS"), variable
    assert not referenced(command) & {"FUSESCHED_JOIN_TOKEN", "PGPASSWORD"}


def test_the_agent_reads_the_rest_from_its_environment() -> None:
    """The agent's controller, CA and join token come from the environment (the options'
    variables), and the shipped agent.yaml is a valid configuration."""
    env = shipped_environment(unit("agent"))
    assert {"FUSESCHED_CONTROLLER", "FUSESCHED_CA", "FUSESCHED_JOIN_TOKEN"} <= env.keys()
    assert load_config(UNITS / "agent.yaml").image_cache_dir.is_relative_to("/var/lib")


def test_systemd_analyze_verify_accepts_the_units(tmp_path: Path) -> None:
    """systemd's own check: known settings with valid values, an executable command."""
    if shutil.which("systemd-analyze") is None:
        pytest.skip("systemd-analyze is not installed")
    for path in UNITS.glob("*.service"):  # (verify wants the command to exist)
        (tmp_path / path.name).write_text(path.read_text().replace(INSTALLED, FUSESCHED))
    units = sorted(str(p) for p in tmp_path.glob("*.service"))
    assert len(units) == 2
    done = subprocess.run(
        ["systemd-analyze", "verify", *units], capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0 and not done.stdout + done.stderr, done.stdout + done.stderr


def test_the_unit_reader_follows_systemd(tmp_path: Path) -> None:
    text = (
        "[Service]\n"
        "# a comment\n"
        "Environment=A=1 'B=two words'\n"
        "EnvironmentFile=/etc/x.env\n"
        "EnvironmentFile=-/etc/missing.env\n"
        "ExecStart=/bin/prog --a ${A} \\\n"
        "    --b=${B} $OPTS $EMPTY\n"
        "CapabilityBoundingSet=CAP_KILL\n"
        "CapabilityBoundingSet=\n"
    )
    service = parse_unit(text)
    (tmp_path / "etc").mkdir()
    (tmp_path / "etc" / "x.env").write_text('# c\nA=3\nOPTS="-x  -y"\nEMPTY=\n')
    env = service_environment(service, tmp_path)
    assert env == {"A": "3", "B": "two words", "OPTS": "-x  -y", "EMPTY": ""}
    command = service.value("Service", "ExecStart")
    assert exec_argv(command, env) == ["/bin/prog", "--a", "3", "--b=two words", "-x", "-y"]
    assert referenced(command) == {"A", "B", "OPTS", "EMPTY"}
    assert service.values("Service", "CapabilityBoundingSet") == []
    with pytest.raises(KeyError, match=r"\$B"):
        exec_argv(command, {"A": "1", "OPTS": "", "EMPTY": ""})
    assert edit_env_file("A=1\n# x\nB=2\n", {"B": "3"}) == "A=1\n# x\nB=3\n"
    with pytest.raises(KeyError, match="C="):
        edit_env_file("A=1\n", {"C": "3"})
