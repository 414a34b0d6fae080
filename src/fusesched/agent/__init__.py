"""The node agent's local side: discovery, task processes, containers and images.

The HTTP conversation with the controller lives in :mod:`fusesched.agent.client`; this package
also provides what it drives: :func:`discover` (what the node offers), :class:`ProcessRuntime`
(tasks as real processes, optionally in bubblewrap containers) and :class:`FakeRuntime` (tasks
on an injected clock). See docs/AGENT.md.
"""

from fusesched.agent.config import AgentConfig, ConfigError, load_config
from fusesched.agent.discovery import discover
from fusesched.agent.fake import FakeRuntime
from fusesched.agent.images import ImageCache, ImageError
from fusesched.agent.logtext import chunk_end
from fusesched.agent.runtime import ProcessRuntime

__all__ = [
    "AgentConfig",
    "ConfigError",
    "FakeRuntime",
    "ImageCache",
    "ImageError",
    "ProcessRuntime",
    "chunk_end",
    "discover",
    "load_config",
]
