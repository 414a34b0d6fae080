"""Small hand-written trace samples for the loader and CLI tests.

The texts live here, in code, and are written to a temporary folder when the tests start, so
no trace file is tracked in the project (real traces are read from ``../shared/traces``).
"""

from __future__ import annotations

import atexit
import shutil
import tempfile
from pathlib import Path

#: An SWF file with the awkward cases: header keys with and without a space, comments between
#: records, -1 fields, a zero run time, records out of job-number order, missing trailing fields.
SMALL_SWF_TEXT = """\
; Version: 2.2
; Computer: hand-made fixture for fusesched tests
; MaxNodes: 4 (plus 2 service nodes)
;MaxProcs: 8
; Note: first note
; Note: second note
;
; job 3 comes first on purpose; job 4 has run time 0 and is dropped by the clean-up
3   40   5   30   2   1.5  -1   2  60  -1 1 1 1 1 1 1 -1 -1
1    0   0  100   1  0.25 -1   1  -1  -1 1 1 1 1 1 1 -1 -1
2   10   0   -1   -1 -1   -1   4 200  -1 5 2 1 1 1 1 -1 -1

; a comment between records
4   20   0    0   1  -1   -1   1  50  -1 5 2 1 1 1 1 -1 -1
5   30   0   -1   1  -1   -1   1  -1  -1 5 2 1 1 1 1 -1 -1
6   50   0   20   3  -1   -1   1  10
"""

#: An openb node list: two GPU nodes and a CPU-only node.
OPENB_NODES_TEXT = """\
sn,cpu_milli,memory_mib,gpu,model
node-a,64000,262144,2,P100
node-b,96000,786432,8,G2
node-c,32000,131072,0,
"""

#: An openb pod list: a whole-GPU pod, a sharing pod with a model list, a CPU-only pod with a
#: stray gpu_milli, and an 8-GPU pod whose gpu_milli (1200) is clamped to 1000.
OPENB_PODS_TEXT = "".join(
    [
        "name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec,qos,pod_phase,"
        "creation_time,deletion_time,scheduled_time\n",
        "pod-0,12000,16384,1,1000,,LS,Running,0,100,0\n",
        "pod-1,6000,12288,1,460,V100M16|V100M32,BE,Pending,5,,\n",
        "pod-2,4000,8192,0,500,T4,LS,Running,7,9,8\n",
        "pod-3,8000,32768,8,1200,,LS,Failed,9,20,10\n",
    ]
)

_FOLDER = Path(tempfile.mkdtemp(prefix="fusesched-samples-"))
atexit.register(shutil.rmtree, _FOLDER, True)


def _write(name: str, text: str) -> Path:
    path = _FOLDER / name
    path.write_text(text)
    return path


SMALL_SWF = _write("small.swf", SMALL_SWF_TEXT)
OPENB_NODES = _write("openb_nodes.csv", OPENB_NODES_TEXT)
OPENB_PODS = _write("openb_pods.csv", OPENB_PODS_TEXT)
