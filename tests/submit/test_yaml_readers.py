"""libyaml reads plain submission files; the pure-Python reader decides everything else.

``load_documents`` takes libyaml's reading only for printable-ASCII text it accepts; these
tests check that, on such text, both readers give the same documents (data, lines, raw
scalars), and that faults and other text get the pure reader's messages.
"""

from __future__ import annotations

import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from fusesched.submit import _yamldoc
from fusesched.submit.errors import SubmitError

pytestmark = pytest.mark.skipif(
    _yamldoc._FAST_LOADER is None, reason="PyYAML was built without libyaml"
)

PIECES = [
    "a: 1\n", "b: [1, 2]\n", "- x\n", "k: v # c\n", "---\n", "...\n", "&a x", "*a", "!!str 3",
    "? k\n: v\n", "d: |\n  t\n", "e: >\n  f\n", "f: 'it''s'\n", "g: {a: 1, a: 2}\n",
    "h: 0x1F\n", "i: 1_000\n", "j: 2024-01-01\n", "  ", "\n", ":", "%YAML 1.1\n", "l: ~\n",
    "m: .inf\n", "o: [a, b\n", "p: {a: }\n", "- - x\n", "q:\n  - 1\n  - 2\n", "r: @x\n",
    "s: `x\n", "t: %x\n", "z: a:b\n", "w: - x\n", "v: [a, {b: c}]\n", "u: !!binary aGk=\n",
    "t: !x y\n", "<<: *a\n", "s: &a {k: 1}\n", "? [a]\n: b\n", "p: 'x\n  y'\n", "#c\n",
    "n:\n- 1\n", "   - a\n", "m: 1\n  n: 2\n", 'o: "x\\\n  y"\n', 'y: "\\t\\u00e9"\n',
]  # fmt: skip


def reading(loader: type[yaml.SafeLoader], text: str) -> object:
    try:
        docs = _yamldoc._read(loader(text), "f.yaml")
    except (yaml.YAMLError, SubmitError) as exc:
        return type(exc)
    return [(d.data, d.line, dict(d.lines), dict(d.raw)) for d in docs]


@settings(max_examples=400, deadline=None)
@given(st.lists(st.sampled_from(PIECES), min_size=1, max_size=8).map("".join))
def test_plain_text_reads_the_same_with_both_readers(text: str) -> None:
    assert not _yamldoc._NOT_PLAIN.search(text)
    fast = reading(_yamldoc._FAST_LOADER, text)  # type: ignore[arg-type]
    if isinstance(fast, list):
        assert fast == reading(yaml.SafeLoader, text)


@pytest.mark.parametrize(
    "text",
    ["m: .inf\np: {a: }\n\ufeff", "&a x\t\ti: 1\n", "h: 0x1F\n\ufeff", "\u2028&a x- x\n\t"],
)
def test_text_beyond_plain_ascii_is_left_to_the_pure_reader(text: str) -> None:
    """libyaml accepts these and PyYAML's reader refuses them: the pure reader decides."""
    assert reading(_yamldoc._FAST_LOADER, text) != reading(yaml.SafeLoader, text)  # type: ignore[arg-type]
    with pytest.raises(SubmitError, match="malformed YAML"):
        _yamldoc.load_documents(text, "f.yaml")


@pytest.mark.parametrize("text", ["a: [1, 2\n", "a: 1\na: 2\n", "a: 1\n  b: 2\n", "- a\nb: c\n"])
def test_faults_get_the_pure_readers_message(text: str) -> None:
    with pytest.raises(SubmitError) as fast:
        _yamldoc.load_documents(text, "f.yaml")
    fallback = _yamldoc._FAST_LOADER
    try:
        _yamldoc._FAST_LOADER = None
        with pytest.raises(SubmitError) as pure:
            _yamldoc.load_documents(text, "f.yaml")
    finally:
        _yamldoc._FAST_LOADER = fallback
    assert str(fast.value) == str(pure.value)
