"""The job numbers (seqs) a controller hands out: reserved from the store in blocks, one
transaction per :data:`SEQ_BLOCK` jobs rather than per job. A refused submission gives its
numbers back (:meth:`JobNumbers.release`: refusals leave no gaps), a clean stop the rest of
its block (:meth:`JobNumbers.give_back`: the next controller goes on from there); a crash
skips the rest, as Slurm's job ids may skip."""

from __future__ import annotations

from fusesched.store.store import Store

#: Job numbers reserved from the store at a time.
SEQ_BLOCK = 1000


class JobNumbers:
    """The block of job numbers reserved from ``store`` and not yet handed out."""

    def __init__(self, store: Store) -> None:
        self._store = store
        self.next = 0  # the next number to hand out
        self._left = 0  # how many of the block are left

    def allocate(self, n: int) -> int:
        """The first of ``n`` new job numbers (a new block when this one has too few)."""
        if n > self._left:
            block = max(n, SEQ_BLOCK)
            self.next = self._store.next_job_seq(block).start
            self._left = block
        first = self.next
        self.next += n
        self._left -= n
        return first

    def release(self, first: int, n: int) -> None:
        """Give back the numbers of the last :meth:`allocate` (a refused submission), so that
        the next job takes them."""
        if first + n != self.next:
            raise ValueError(f"job numbers {first}..{first + n - 1} are not the last allocated")
        self.next = first
        self._left += n

    def give_back(self) -> None:
        """Return the rest of the block to the store (a clean stop); what the store raises
        when it cannot is the caller's: the numbers are skipped then."""
        if self._left > 0:
            left, self._left = self._left, 0
            self._store.return_job_seqs(self.next, self.next + left - 1)
