"""fusesched — the fused scheduler."""

__version__ = "0.1.0"
