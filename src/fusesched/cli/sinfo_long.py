"""``fusesched sinfo -O/--Format``: sinfo's long field names (``NodeList,StateLong:12``), each
the same field as a ``-o`` letter of :mod:`fusesched.cli.sinfo_format`.

Slurm's sinfo has more ``-O`` names; those with no ``-o`` letter here (``AllocMem``,
``GresUsed``, ``Version``…) are refused with the list of the known
ones, as an unknown name is. A field is read as squeue's ``-O`` reads it
(:func:`fusesched.cli.squeue_format.parse_long_format`, as Slurm 22.05's): 20 wide unless
``:WIDTH`` says (``:.WIDTH``: right-justified; ``:`` or ``:0``: as long as its value), its
value cut to the width and padded to it, the text after the width printed after it.
"""

from __future__ import annotations

from typing import Final

from fusesched.cli.sinfo_format import FIELDS
from fusesched.cli.squeue_format import Piece, parse_long_format

#: ``-O`` names (lower case; any case is taken) as ``-o`` letters.
LONG_FIELDS: Final[dict[str, str]] = {
    "available": "a",
    "cpus": "c",
    "cpusload": "O",
    "cpusstate": "C",
    "cores": "Y",
    "disk": "d",
    "features": "f",
    "features_act": "b",
    "freemem": "e",
    "gres": "G",
    "groups": "g",
    "maxcpuspernode": "B",
    "memory": "m",
    "nodeaddr": "o",
    "nodeai": "A",
    "nodeaiot": "F",
    "nodehost": "n",
    "nodelist": "N",
    "nodes": "D",
    "oversubscribe": "h",
    "partition": "P",
    "partitionname": "R",
    "reason": "E",
    "root": "r",
    "size": "s",
    "socketcorethread": "z",
    "sockets": "X",
    "statecompact": "t",
    "statelong": "T",
    "threads": "Z",
    "time": "l",
    "timestamp": "H",
    "user": "u",
    "userlong": "U",
    "weight": "w",
}


def parse(text: str) -> list[Piece]:
    """``-O`` text as the pieces of a line; a
    :class:`~fusesched.cli.squeue_format.FormatError` naming the known fields for another."""
    return parse_long_format(text, LONG_FIELDS, FIELDS, example="NodeList,StateLong")
