"""What ``srun`` (agent/step.py) reads of the controller's refusals: why it refused
(:func:`controller_detail`, never echoing what was sent) and whether it refused a field it
does not know, being older than it (:func:`refuses_field`)."""

from __future__ import annotations

import httpx


def controller_detail(response: httpx.Response) -> str:
    """Why the controller refused: its ``detail``; a validation error's places and messages
    only (it echoes what was sent, the variables' values among it: never printed)."""
    try:
        body = response.json()
    except ValueError:
        return response.text.strip() or f"HTTP {response.status_code}"
    detail = body.get("detail") if isinstance(body, dict) else None
    if isinstance(detail, list):
        return "; ".join(_problem(item) for item in detail) or f"HTTP {response.status_code}"
    return str(detail) if detail else response.text.strip()


def _problem(item: object) -> str:
    if not isinstance(item, dict):
        return "invalid request"
    where = ".".join(str(part) for part in item.get("loc", [])[1:])  # (after "body")
    return f"{where}: {item.get('msg', 'invalid')}" if where else str(item.get("msg", "invalid"))


def refuses_field(response: httpx.Response, name: str) -> bool:
    """Whether a 422 refuses ``name`` as a field the controller does not know."""
    try:
        detail = response.json().get("detail")
    except (ValueError, AttributeError):
        return False
    return isinstance(detail, list) and any(
        isinstance(item, dict)
        and item.get("type") == "extra_forbidden"
        and list(item.get("loc", []))[-1:] == [name]
        for item in detail
    )
