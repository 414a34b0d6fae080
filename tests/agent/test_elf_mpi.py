"""srun's MPI steps without I/O: the ELF reader (agent/elf.py) on programs built here, and
the mpirun step (agent/step_mpi.py): when it is used, its command line and environment,
and its rank tags as srun's labels."""

from __future__ import annotations

import shutil
import struct
import subprocess
import sys
from pathlib import Path

import pytest

from fusesched.agent.elf import ElfError, needed_libraries
from fusesched.agent.step_mpi import label_line, links_mpi, mpi_mode, mpirun_argv, mpirun_env
from fusesched.agent.step_plan import place

MPI_HELLO = (
    "#include <mpi.h>\nint main(int c, char **v) { MPI_Init(&c, &v); return MPI_Finalize(); }\n"
)


@pytest.mark.skipif(shutil.which("mpicc") is None, reason="OpenMPI (mpicc) is not installed")
def test_an_mpi_program_is_told_by_its_libraries(tmp_path: Path) -> None:
    source = tmp_path / "hello.c"
    source.write_text(MPI_HELLO)
    program = tmp_path / "hello"
    subprocess.run(["mpicc", "-o", str(program), str(source)], check=True)
    needed = needed_libraries(program.read_bytes())
    assert any(name.startswith("libmpi.so") for name in needed), needed
    assert links_mpi(needed)
    python = needed_libraries(Path(sys.executable).resolve().read_bytes())
    assert not links_mpi(python)


def test_not_an_elf_program() -> None:
    with pytest.raises(ElfError, match="not an ELF"):
        needed_libraries(b"#!/bin/sh\necho hi\n" * 4)
    elf = bytearray(_elf32_big_endian(["libmpi.so.40"]))
    struct.pack_into(">I", elf, 0x1C, 1 << 20)  # program headers past the end
    with pytest.raises(ElfError, match="past the file's end"):
        needed_libraries(bytes(elf))


def _elf32_big_endian(names: list[str], filler: int = 0) -> bytes:
    """A minimal 32-bit big-endian ELF: one PT_LOAD over the file, one PT_DYNAMIC (with
    ``filler`` DT_DEBUG entries before the rest)."""
    strings = b"\0" + b"".join(n.encode() + b"\0" for n in names)
    phoff, strtab_at = 52, 52 + 2 * 32
    dynamic_at = strtab_at + len(strings)
    offsets, at = [], 1
    for name in names:
        offsets.append(at)
        at += len(name) + 1
    entries = [(21, 0)] * filler + [(1, o) for o in offsets] + [(5, 0x1000 + strtab_at), (0, 0)]
    dynamic = b"".join(struct.pack(">iI", tag, value) for tag, value in entries)
    size = dynamic_at + len(dynamic)
    header = b"\x7fELF\x01\x02\x01" + bytes(9)
    header += struct.pack(">HHIIIIIHHHHHH", 2, 8, 1, 0, phoff, 0, 0, 52, 32, 2, 0, 0, 0)
    load = struct.pack(">IIIIIIII", 1, 0, 0x1000, 0x1000, size, size, 5, 0x1000)
    dyn = struct.pack(">IIIIIIII", 2, dynamic_at, 0x1000 + dynamic_at, 0, len(dynamic), 0, 6, 4)
    return header + load + dyn + strings + dynamic


def test_a_32_bit_big_endian_program() -> None:
    assert needed_libraries(_elf32_big_endian(["libmpi.so.40", "libc.so.6"])) == [
        "libmpi.so.40",
        "libc.so.6",
    ]
    assert needed_libraries(_elf32_big_endian([])) == []


def test_a_malformed_program_costs_a_bounded_read() -> None:
    """A name with no end near it, or a dynamic section with no end, is refused after a
    bounded read (not scanned byte by byte through a program of gigabytes)."""
    assert needed_libraries(_elf32_big_endian(["libmpi.so.40"], filler=1000)) == ["libmpi.so.40"]
    with pytest.raises(ElfError, match="no end within 16384 entries"):
        needed_libraries(_elf32_big_endian(["libmpi.so.40"], filler=20_000))
    assert needed_libraries(_elf32_big_endian(["lib" + "m" * 4000])) == ["lib" + "m" * 4000]
    with pytest.raises(ElfError, match="no end within 4096 bytes"):
        needed_libraries(_elf32_big_endian(["lib" + "m" * 5000]))


def test_which_steps_run_through_mpirun() -> None:
    assert mpi_mode("pmix", None) and mpi_mode("pmix_v4", None) and mpi_mode("pmi2", None)
    assert mpi_mode("none", "pmix") is False  # --mpi wins over the site default
    assert mpi_mode(None, "pmix_v3") is True  # SLURM_MPI_TYPE, as Slurm's srun reads it
    assert mpi_mode(None, None) is None  # the program decides
    assert mpi_mode("cray_shasta", None) is False
    assert links_mpi(["libmpi_cxx.so.40"]) and not links_mpi(["libmpich.so.12", "libc.so.6"])


def test_the_steps_mpirun() -> None:
    tasks, _ = place([("node-a", 2), ("node-b", 2)], 3, None, None)
    exported = {"A": "1", "SLURM_PROCID": "0", "RANK": "0", "PATH": "/bin"}
    environ = {"OMPI_MCA_btl": "tcp,self", "OMPI_MCA_orte_default_hostfile": "/t/h"}
    own, passed = mpirun_env(exported, environ, tasks, None, "py -m fusesched.agent.remote")
    assert own["OMPI_MCA_plm_rsh_agent"] == "py -m fusesched.agent.remote"
    assert own["OMPI_MCA_plm"] == "rsh" and own["OMPI_MCA_ras"] == "^slurm"
    assert own["OMPI_MCA_btl"] == "tcp,self"  # the script's own OpenMPI settings
    assert "OMPI_MCA_orte_default_hostfile" not in own  # the step has its own nodes
    assert own["SLURM_STEP_NUM_TASKS"] == own["WORLD_SIZE"] == "3"
    assert "SLURM_PROCID" not in own and "RANK" not in own  # the script's own: not the ranks'
    assert {"A", "PATH", "SLURM_STEP_NODELIST", "SLURM_STEP_ID"} <= set(passed)
    assert not any(name.startswith("OMPI_") for name in passed)
    argv = mpirun_argv(tasks, ["A"], True, ["./app", "-v"])
    assert argv[:4] == ["mpirun", "-np", "3", "--host"] and argv[4] == "node-a:2,node-b:1"
    assert {"--bind-to", "none", "--nooversubscribe", "--tag-output"} <= set(argv)
    assert argv[argv.index("-x") + 1] == "A"
    assert argv[-2:] == ["./app", "-v"]
    ranked = subprocess.run(
        [*argv[argv.index("/bin/sh") : -2], "sh", "-c", "echo $SLURM_PROCID $LOCAL_RANK"],
        env={"OMPI_COMM_WORLD_RANK": "2", "OMPI_COMM_WORLD_LOCAL_RANK": "0"},
        capture_output=True,
        text=True,
        check=True,
    )
    assert ranked.stdout == "2 0\n"
    assert "--tag-output" not in mpirun_argv(tasks, [], False, ["./app"])


def test_rank_tags_become_labels() -> None:
    assert label_line("[1,3]<stdout>:hello: world") == "3: hello: world"
    assert label_line("[1,0]<stderr>:oops") == "0: oops"
    assert label_line("mpirun noticed that…") == "mpirun noticed that…"
