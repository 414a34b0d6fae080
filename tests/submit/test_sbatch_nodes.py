"""``sbatch -w/--nodelist`` and ``-x/--exclude``: Slurm host lists as hostname terms."""

from __future__ import annotations

import re
import time

import pytest

from fusesched.hostlist import MAX_HOSTS, expand_hostlist
from fusesched.model.job import LabelOp
from fusesched.model.node import LABEL_HOSTNAME
from fusesched.submit import SubmitError, parse_sbatch


@pytest.mark.parametrize(
    ("text", "hosts"),
    [
        ("node1", ["node1"]),
        ("a,b , c", ["a", "b", "c"]),
        ("node[01-03]", ["node01", "node02", "node03"]),
        ("node[1-3,07],gpu5", ["node1", "node2", "node3", "node07", "gpu5"]),
        ("n[8-11]", ["n8", "n9", "n10", "n11"]),
        ("n[098-100]", ["n098", "n099", "n100"]),
        ("r[1-2]n[1-2]", ["r1n1", "r1n2", "r2n1", "r2n2"]),
        ("[1-2]x", ["1x", "2x"]),
        ("a,a,node[1-2],node1", ["a", "node1", "node2"]),
        ("cn-1.cluster_x", ["cn-1.cluster_x"]),
    ],
)
def test_expand(text: str, hosts: list[str]) -> None:
    assert expand_hostlist(text) == hosts


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("", "an empty host name"),
        ("a,,b", "an empty host name"),
        ("a,", "an empty host name"),
        ("node[1-3", "a '[' without its ']'"),
        ("node1-3]", "a ']' without its '['"),
        ("n[1-[2]]", "brackets cannot nest"),
        ("n[]", "cannot read []"),
        ("n[a-c]", "cannot read [a-c]"),
        ("n[1-2-3]", "cannot read [1-2-3]"),
        ("n[5-3]", "the range 5-3 runs backwards"),
        ("n[0-99999999]", f"names more than {MAX_HOSTS:,} hosts"),
        ("a[1-1000]b[1-1000]", f"names more than {MAX_HOSTS:,} hosts"),
        ("/etc/hosts.txt", "host files are not supported"),
        ("node 1", "letters, digits"),
        ("node*", "letters, digits"),
    ],
)
def test_malformed(text: str, message: str) -> None:
    with pytest.raises(ValueError, match=re.escape(message)):
        expand_hostlist(text)


def script(directives: str) -> str:
    return "#!/bin/sh\n" + directives + "\nhostname\n"


def test_nodelist_and_exclude_become_hostname_terms() -> None:
    parsed = parse_sbatch(script("#SBATCH -w node[1-2] --exclude=gpu[01-02],gpu07 -C ib"))
    required = [(r.key, r.op, r.values) for r in parsed.request.placement.required]
    assert required == [
        ("feature.fusesched.io/ib", LabelOp.EXISTS, []),
        (LABEL_HOSTNAME, LabelOp.IN, ["node1", "node2"]),
        (LABEL_HOSTNAME, LabelOp.NOT_IN, ["gpu01", "gpu02", "gpu07"]),
    ]
    assert parsed.warnings == ()
    placement = parsed.request.to_job_spec("1", 0.0).placement
    assert placement.allows({LABEL_HOSTNAME: "node2", "feature.fusesched.io/ib": ""})
    assert not placement.allows({LABEL_HOSTNAME: "node3", "feature.fusesched.io/ib": ""})


def test_command_line_overrides_and_short_forms() -> None:
    req = parse_sbatch(script("#SBATCH --nodelist=a"), args=["-wb,c", "-x", "d"]).request
    assert [(r.op, r.values) for r in req.placement.required] == [
        (LabelOp.IN, ["b", "c"]),
        (LabelOp.NOT_IN, ["d"]),
    ]


def test_more_nodes_than_listed_warns() -> None:
    parsed = parse_sbatch(script("#SBATCH -N 3 -w n[1-2]"), source="job.sh")
    assert parsed.warnings == (
        "job.sh:2: 3 nodes asked for but 2 listed: the job runs on the listed nodes only",
    )
    assert parse_sbatch(script("#SBATCH -N 2 -w n[1-2]")).warnings == ()
    assert parse_sbatch(script("#SBATCH -N 3 -x n[1-2]")).warnings == ()


@pytest.mark.parametrize(
    ("directives", "args", "message"),
    [
        ("#SBATCH -w n[1-", [], "<script>:2: -w: 'n[1-': a '[' without its ']'"),
        ("", ["--exclude=a,,b"], "command line: --exclude: 'a,,b': an empty host name"),
        ("#SBATCH -w n[1-3] -x n2", [], "<script>:2: -x: n2: both in --nodelist and excluded"),
        ("#SBATCH --nodelist=./hosts", [], "host files are not supported"),
    ],
)
def test_refused(directives: str, args: list[str], message: str) -> None:
    with pytest.raises(SubmitError, match=re.escape(message)):
        parse_sbatch(script(directives), args=args)


def test_many_ranges_in_one_pair_of_brackets_are_counted_before_they_are_made() -> None:
    """Each range under the limit, together over it: refused before 100,000s of names are
    built (an 8 KB option could otherwise take gigabytes in the controller)."""
    many = "n[" + ",".join(["0-99998"] * 1000) + "]"
    start = time.perf_counter()
    with pytest.raises(ValueError, match=f"more than {MAX_HOSTS:,} hosts"):
        expand_hostlist(many)
    assert time.perf_counter() - start < 2.0


def test_numbers_too_long_for_a_host_are_refused() -> None:
    with pytest.raises(ValueError, match="at most 18 digits"):
        expand_hostlist("n[" + "9" * 5000 + "]")


@pytest.mark.parametrize("text", ["n[٠-٣]", "n[0-٣]", "n[１]"])
def test_host_ranges_take_ascii_digits_only(text: str) -> None:
    """Python's ``\\d`` matches any script's digits and ``int`` reads them: ``n[٠-٣]`` was
    n0…n3, names no node has."""
    with pytest.raises(ValueError, match="cannot read"):
        expand_hostlist(text)
