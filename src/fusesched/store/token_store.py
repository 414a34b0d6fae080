"""The tokens of :class:`~fusesched.store.store.Store`: the hashes of users', agents' and
jobs' API tokens (docs/TENANCY.md), stored, looked up, used (a join token: once) and
revoked. Their own table; nothing here reads or writes another."""

from __future__ import annotations

from collections.abc import Collection

from sqlalchemy import func, insert, select, update
from sqlalchemy.exc import IntegrityError

from fusesched.store.connected import Connected
from fusesched.store.convert import token_row, token_values
from fusesched.store.errors import DuplicateToken
from fusesched.store.records import TokenKind, TokenRow
from fusesched.store.schema import tokens


class TokenStore(Connected):
    """The token methods of :class:`~fusesched.store.store.Store`."""

    def add_token(self, row: TokenRow) -> None:
        """Store a token (its hash; the secret is never stored). A repeated id raises
        :class:`DuplicateToken`."""
        try:
            with self._write() as conn:
                conn.execute(insert(tokens), [token_values(row)])
        except IntegrityError as error:
            if self.get_token(row.id) is not None:
                raise DuplicateToken([row.id]) from error
            raise

    def get_token(self, token_id: str) -> TokenRow | None:
        """The token with this public id, or ``None``."""
        with self._read() as conn:
            found = conn.execute(select(tokens).where(tokens.c.id == token_id)).mappings().first()
        return None if found is None else token_row(found)

    def use_join_token(self, token_id: str, now: float) -> TokenRow | None:
        """Mark a join token used, atomically: of two concurrent calls exactly one gets the
        token back; ``None`` when it is not a usable join token (unknown, used, revoked or
        expired)."""
        usable = (
            (tokens.c.id == token_id)
            & (tokens.c.kind == TokenKind.JOIN.value)
            & tokens.c.used_at.is_(None)
            & tokens.c.revoked.is_(False)
            & (tokens.c.expires_at.is_(None) | (tokens.c.expires_at > now))
        )
        stmt = update(tokens).where(usable).values(used_at=now).returning(*tokens.c)
        with self._write() as conn:
            found = conn.execute(stmt).mappings().first()
        return None if found is None else token_row(found)

    def revoke_token(self, token_id: str) -> bool:
        """Revoke one token; ``False`` when there is no such token."""
        stmt = update(tokens).where(tokens.c.id == token_id).values(revoked=True)
        with self._write() as conn:
            return bool(conn.execute(stmt).rowcount)

    def revoke_job_tokens(
        self, job_ids: Collection[str] | None = None, keep: Collection[str] = ()
    ) -> int:
        """Revoke the job tokens of these jobs (of every job when ``None``) but those of the
        jobs in ``keep``; the count."""
        stmt = (
            update(tokens)
            .where(tokens.c.kind == TokenKind.JOB.value, tokens.c.revoked.is_(False))
            .values(revoked=True)
        )
        if keep:
            stmt = stmt.where(tokens.c.job_id.not_in(sorted(keep)))
        if job_ids is not None:
            if not job_ids:
                return 0
            stmt = stmt.where(tokens.c.job_id.in_(sorted(job_ids)))
        with self._write() as conn:
            return int(conn.execute(stmt).rowcount)

    def list_tokens(
        self,
        *,
        kind: TokenKind | str | None = None,
        tenant: str | None = None,
        include_revoked: bool = False,
    ) -> list[TokenRow]:
        """Tokens, oldest first, filtered by kind and tenant; revoked ones only on request."""
        stmt = select(tokens).order_by(tokens.c.created_at, tokens.c.id)
        if kind is not None:
            stmt = stmt.where(tokens.c.kind == TokenKind(kind).value)
        if tenant is not None:
            stmt = stmt.where(tokens.c.tenant == tenant)
        if not include_revoked:
            stmt = stmt.where(tokens.c.revoked.is_(False))
        with self._read() as conn:
            return [token_row(m) for m in conn.execute(stmt).mappings()]

    def count_tokens(self) -> int:
        """How many tokens were ever stored (revoked ones included)."""
        with self._read() as conn:
            return int(conn.execute(select(func.count()).select_from(tokens)).scalar_one())
