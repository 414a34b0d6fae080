"""The shared libraries an ELF program names (its dynamic section's ``DT_NEEDED`` entries),
read without running anything: ``srun`` tells an MPI program by them (one that needs
``libmpi``), to start it with ``mpirun`` (:mod:`fusesched.agent.step_mpi`).

Pure: it reads a buffer (the program's bytes; ``srun`` maps the file), 32- and 64-bit,
either byte order, through the program headers alone (``PT_DYNAMIC``, and the ``PT_LOAD``
segment that holds the string table): what the dynamic loader itself reads, so a stripped
program (no section headers) is read too.
"""

from __future__ import annotations

import struct

from typing_extensions import Buffer

MAGIC = b"\x7fELF"
#: What a well-formed program stays within (real ones: tens of dynamic entries, names of a
#: few dozen bytes); past these a file is taken as malformed, so a broken or hostile one
#: costs a bounded read, not a scan of its gigabytes byte by byte.
MAX_DYNAMIC_ENTRIES = 1 << 14
MAX_NAME_BYTES = 4096
_PT_LOAD, _PT_DYNAMIC = 1, 2
_DT_NULL, _DT_NEEDED, _DT_STRTAB = 0, 1, 5


class ElfError(ValueError):
    """Not an ELF program, or one whose headers point outside it."""


def needed_libraries(data: Buffer) -> list[str]:
    """The ``DT_NEEDED`` names of the ELF program ``data`` in order (none for a static one);
    :class:`ElfError` when ``data`` is not a readable ELF file."""
    with memoryview(data) as view:  # (released at once: a mapped file can then be closed)
        return _needed(view)


def _needed(view: memoryview) -> list[str]:
    if len(view) < 52 or bytes(view[:4]) != MAGIC:
        raise ElfError("not an ELF file")
    wide = view[4] == 2  # EI_CLASS: 1 32-bit, 2 64-bit
    order = "<" if view[5] == 1 else ">"  # EI_DATA: 1 little-endian, 2 big
    if wide:
        (phoff,) = _unpack(view, order + "Q", 0x20)
        phentsize, phnum = _unpack(view, order + "HH", 0x36)
        dyn_entry = order + "qQ"
    else:
        (phoff,) = _unpack(view, order + "I", 0x1C)
        phentsize, phnum = _unpack(view, order + "HH", 0x2A)
        dyn_entry = order + "iI"
    loads: list[tuple[int, int, int]] = []  # (vaddr, filesz, offset)
    dynamic: tuple[int, int] | None = None  # (offset, filesz)
    for k in range(phnum):
        p_type, offset, vaddr, filesz = _program_header(view, order, phoff + k * phentsize, wide)
        if p_type == _PT_LOAD:
            loads.append((vaddr, filesz, offset))
        elif p_type == _PT_DYNAMIC:
            dynamic = (offset, filesz)
    if dynamic is None:
        return []  # linked statically: it needs no library
    size = struct.calcsize(dyn_entry)
    needed: list[int] = []
    strtab: int | None = None
    start, length = dynamic
    for k in range(length // size):
        if k == MAX_DYNAMIC_ENTRIES:
            raise ElfError(f"its dynamic section has no end within {k} entries")
        tag, value = _unpack(view, dyn_entry, start + k * size)
        if tag == _DT_NULL:
            break
        if tag == _DT_NEEDED:
            needed.append(value)
        elif tag == _DT_STRTAB:
            strtab = value
    if not needed:
        return []
    if strtab is None:
        raise ElfError("its dynamic section has no string table")
    base = _file_offset(loads, strtab)
    return [_string(view, base + name) for name in needed]


def _program_header(view: memoryview, order: str, at: int, wide: bool) -> tuple[int, ...]:
    """(type, file offset, virtual address, size in the file) of the header at ``at``."""
    if wide:  # p_type p_flags p_offset p_vaddr p_paddr p_filesz
        p_type, _, offset, vaddr, _, filesz = _unpack(view, order + "IIQQQQ", at)
    else:  # p_type p_offset p_vaddr p_paddr p_filesz
        p_type, offset, vaddr, _, filesz = _unpack(view, order + "IIIII", at)
    return p_type, offset, vaddr, filesz


def _file_offset(loads: list[tuple[int, int, int]], address: int) -> int:
    for vaddr, filesz, offset in loads:
        if vaddr <= address < vaddr + filesz:
            return address - vaddr + offset
    raise ElfError(f"address {address:#x} is in no loaded segment")


def _string(view: memoryview, at: int) -> str:
    if not 0 <= at < len(view):
        raise ElfError(f"a library name at {at:#x}, past the file's end")
    name, nul, _ = bytes(view[at : at + MAX_NAME_BYTES + 1]).partition(b"\0")
    if not nul:
        raise ElfError(f"a library name at {at:#x} has no end within {MAX_NAME_BYTES} bytes")
    return name.decode("utf-8", "replace")


def _unpack(view: memoryview, fmt: str, at: int) -> tuple[int, ...]:
    if at < 0 or at + struct.calcsize(fmt) > len(view):
        raise ElfError(f"a header at {at:#x} runs past the file's end")
    return struct.unpack_from(fmt, view, at)
