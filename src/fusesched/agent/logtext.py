"""Task logs as text: chunks that never split a UTF-8 character and whose byte length is
always the number of log bytes they cover (each undecodable byte reads as one ``?``)."""

from __future__ import annotations

from fusesched.api.wire import LogChunk

MAX_LOG_CHUNK = 256 * 1024
# surrogateescape turns each undecodable byte into one of these; each becomes one "?" (1 byte),
# so a chunk's UTF-8 length always equals the number of log bytes it covers.
_UNDECODABLE = {0xDC80 + i: "?" for i in range(128)}


def chunk_end(chunk: LogChunk) -> int:
    """The byte offset just after ``chunk``: where the next ``read_log`` should start."""
    return chunk.offset + len(chunk.data.encode("utf-8"))


def decode_log_bytes(raw: bytes) -> str:
    return raw.decode("utf-8", errors="surrogateescape").translate(_UNDECODABLE)


def complete_utf8(raw: bytes) -> bytes:
    """``raw`` without a trailing, possibly unfinished multi-byte UTF-8 sequence."""
    for back in range(1, min(4, len(raw)) + 1):
        byte = raw[-back]
        if byte & 0xC0 == 0x80:  # a continuation byte: keep looking for the lead byte
            continue
        need = 2 if byte & 0xE0 == 0xC0 else 3 if byte & 0xF0 == 0xE0 else 4 if byte >= 0xF0 else 1
        return raw[: len(raw) - back] if need > back else raw
    return raw
