"""The one error every submission path raises: :class:`SubmitError`."""

from __future__ import annotations

from pathlib import Path


class SubmitError(ValueError):
    """A submission that cannot be accepted, with a specific human-readable reason.

    ``str(error)`` reads ``source:line: field: message`` with the parts that are known, e.g.
    ``job.yaml:12: groups[0].resources: unknown resource 'gpux'; did you mean 'gpu'?``.
    """

    def __init__(
        self,
        message: str,
        *,
        source: str | None = None,
        line: int | None = None,
        field: str | None = None,
    ) -> None:
        self.message = message
        self.source = source
        self.line = line
        self.field = field
        super().__init__(self._render())

    def _render(self) -> str:
        where = ""
        if self.source is not None:
            where = self.source if self.line is None else f"{self.source}:{self.line}"
        elif self.line is not None:
            where = f"line {self.line}"
        parts = [p for p in (where, self.field) if p]
        return ": ".join([*parts, self.message])

    def located(self, source: str | None, line: int | None = None) -> SubmitError:
        """The same error with a source (and line) filled in where it had none."""
        return SubmitError(
            self.message,
            source=self.source if self.source is not None else source,
            line=self.line if self.line is not None else line,
            field=self.field,
        )


def read_source(path: str | Path, what: str = "the file") -> tuple[str, str]:
    """``(text, file name)`` of a submission file; a :class:`SubmitError` naming it otherwise."""
    file = Path(path)
    try:
        return file.read_text(encoding="utf-8"), file.name
    except (OSError, UnicodeDecodeError) as exc:
        raise SubmitError(f"cannot read {what}: {exc}", source=str(path)) from exc
