"""YAML documents with the line of every key and item, for errors that point at the file."""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass

import yaml
from yaml.nodes import MappingNode, Node, ScalarNode, SequenceNode

from fusesched.submit.errors import SubmitError
from fusesched.submit.problems import Loc


@dataclass(frozen=True, slots=True)
class Document:
    """One YAML document: its data, where each path starts, and the raw text of scalars."""

    data: object
    source: str
    line: int  # first line of the document
    lines: Mapping[Loc, int]
    raw: Mapping[Loc, str]

    def line_of(self, loc: Loc) -> int:
        """The line of ``loc``, or of its longest known prefix, or of the document."""
        for end in range(len(loc), 0, -1):
            found = self.lines.get(loc[:end])
            if found is not None:
                return found
        return self.line

    def error(self, message: str, loc: Loc = (), field: str | None = None) -> SubmitError:
        return SubmitError(message, source=self.source, line=self.line_of(loc), field=field)


#: libyaml's loader where PyYAML was built with it (several times faster), else the pure one.
_FAST_LOADER: type[yaml.SafeLoader] | None = getattr(yaml, "CSafeLoader", None)

#: What libyaml may read: printable ASCII and line feeds. Beyond it (tabs, carriage returns,
#: byte-order marks, Unicode line separators) the two readers disagree on a few texts.
_NOT_PLAIN = re.compile(r"[^\x20-\x7e\n]")


def load_documents(text: str, source: str) -> list[Document]:
    """Every non-empty document of a YAML stream, each with its line map.

    Malformed YAML and duplicate keys raise :class:`SubmitError` with the line. Plain ASCII
    text is read with libyaml when it is there; when libyaml finds any fault, and for other
    text, the pure-Python reader reads it, so that what is accepted and every message are the
    pure reader's.
    """
    if _FAST_LOADER is not None and not _NOT_PLAIN.search(text):
        try:
            return _read(_FAST_LOADER(text), source)
        except (yaml.YAMLError, SubmitError):
            pass
    try:
        loader = yaml.SafeLoader(text)  # checks the characters already
    except yaml.YAMLError as exc:
        raise SubmitError(f"malformed YAML: {exc}", source=source) from exc
    try:
        return _read(loader, source)
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        line = mark.line + 1 if mark is not None else None
        problem = exc.problem or exc.context or "cannot parse"
        raise SubmitError(f"malformed YAML: {problem}", source=source, line=line) from exc
    except yaml.YAMLError as exc:
        raise SubmitError(f"malformed YAML: {exc}", source=source) from exc


def _read(loader: yaml.SafeLoader, source: str) -> list[Document]:
    """The documents ``loader`` reads (it is disposed of afterwards)."""
    docs: list[Document] = []
    try:
        while loader.check_node():
            node = loader.get_node()
            if node is None:  # pragma: no cover - check_node said there is one
                break
            try:
                data = loader.construct_document(node)
            except (ValueError, OverflowError) as exc:  # e.g. a timestamp's zone +99:00
                raise SubmitError(
                    f"a value cannot be read: {exc}"
                    " (write times as 2030-01-31T08:00:00+01:00, or quote the text)",
                    source=source,
                    line=_culprit_line(loader, node),
                ) from None
            if data is None:
                continue
            lines: dict[Loc, int] = {}
            raw: dict[Loc, str] = {}
            _walk(node, (), lines, raw, source)
            docs.append(Document(data, source, node.start_mark.line + 1, lines, raw))
    finally:
        loader.dispose()
    return docs


def _walk(node: Node, loc: Loc, lines: dict[Loc, int], raw: dict[Loc, str], source: str) -> None:
    if isinstance(node, ScalarNode):
        raw[loc] = str(node.value)
    elif isinstance(node, MappingNode):
        seen: set[str] = set()
        for key_node, value_node in node.value:
            key = str(key_node.value)
            if key in seen:
                raise SubmitError(
                    f"duplicate key {key!r}", source=source, line=key_node.start_mark.line + 1
                )
            seen.add(key)
            lines[(*loc, key)] = key_node.start_mark.line + 1
            _walk(value_node, (*loc, key), lines, raw, source)
    elif isinstance(node, SequenceNode):
        for index, item in enumerate(node.value):
            lines[(*loc, index)] = item.start_mark.line + 1
            _walk(item, (*loc, index), lines, raw, source)


def _culprit_line(loader: yaml.SafeLoader, node: yaml.Node) -> int:
    """The line of the first scalar under ``node`` that cannot be built on its own (else
    the document's first line)."""
    stack = [node]
    while stack:
        current = stack.pop(0)
        if isinstance(current, yaml.ScalarNode):
            try:
                loader.construct_object(current)
            except (ValueError, OverflowError, yaml.YAMLError):
                return int(current.start_mark.line) + 1
        elif isinstance(current, yaml.MappingNode):
            stack.extend(n for pair in current.value for n in pair)
        elif isinstance(current, yaml.SequenceNode):
            stack.extend(current.value)
    return int(node.start_mark.line) + 1
