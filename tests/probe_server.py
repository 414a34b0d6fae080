"""The HTTP server the probe tests run as a task (tests/agent/test_probes.py, on the agent;
tests/live/test_probes_live.py, end to end): its ``GET`` answers 200, or 500 once a flag file
exists, so a test makes a liveness probe fail by creating the file; it starts listening after a
delay, so a readiness probe sees it become ready."""

from __future__ import annotations

import sys
from pathlib import Path

# argv: PORT FLAG DELAY_S [per-restart]; with per-restart the flag is FLAG.<restart count>
SCRIPT = """
import http.server, os, sys, time
port, flag = int(sys.argv[1]), sys.argv[2]
if sys.argv[4:] == ["per-restart"]:
    flag += "." + os.environ["FUSESCHED_RESTART_COUNT"]
time.sleep(float(sys.argv[3]))
class Handler(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        self.send_response(500 if os.path.exists(flag) else 200)
        self.end_headers()
    def log_message(self, *args):
        pass
http.server.HTTPServer(("127.0.0.1", port), Handler).serve_forever()
"""


def probe_server(
    folder: Path, port: int, delay_s: float = 0.0, per_restart: bool = False
) -> list[str]:
    """The argv of the server on ``port``, its script written to ``folder``: it fails once
    ``folder/unhealthy`` exists (with ``per_restart``, ``unhealthy.<restart count>``: each run
    of a restarted task fails on a file of its own) and listens after ``delay_s``."""
    script = folder / "server.py"
    script.write_text(SCRIPT)
    script.chmod(0o644)
    argv = [sys.executable, str(script), str(port), str(folder / "unhealthy"), str(delay_s)]
    return [*argv, "per-restart"] if per_restart else argv
