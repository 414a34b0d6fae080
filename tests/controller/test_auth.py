"""Tokens, hashing and principals (controller/auth.py), against an in-memory store."""

from __future__ import annotations

import hashlib
from collections.abc import Iterator

import pytest

from fusesched.controller.auth import (
    ANONYMOUS,
    Authenticator,
    AuthError,
    Role,
    hash_secret,
    new_token,
    split_token,
    token_id_of,
)
from fusesched.store import Store, TokenKind


@pytest.fixture
def auth() -> Iterator[Authenticator]:
    now = [1000.0]
    with Store("sqlite://") as store:
        checker = Authenticator(store, enabled=True, clock=lambda: now[0])
        checker.now = now  # type: ignore[attr-defined]
        yield checker


def test_token_format_and_hash() -> None:
    token, token_id, digest = new_token()
    prefix, found_id, secret = token.split("_", 2)
    assert prefix == "fsk" and found_id == token_id and len(token_id) == 16
    assert len(secret) >= 40
    assert digest == hashlib.sha256(secret.encode()).hexdigest() == hash_secret(secret)
    assert split_token(token) == (token_id, secret)
    assert token_id_of(token) == token_id
    assert new_token()[0] != token


@pytest.mark.parametrize(
    "bad", ["", "fsk", "fsk_abc_def", "xyz_0123456789abcdef_" + "a" * 43, "fsk_0123_" + "a" * 43]
)
def test_malformed_tokens_are_refused(bad: str) -> None:
    with pytest.raises(AuthError, match="malformed"):
        split_token(bad)


def test_only_the_hash_is_stored(auth: Authenticator) -> None:
    token, row = auth.issue(TokenKind.USER, user="alice", tenant="physics", role="tenant-admin")
    secret = token.split("_", 2)[2]
    stored = auth.store.get_token(row.id)
    assert stored is not None and stored.hash == hash_secret(secret) and secret not in repr(stored)
    me = auth.authenticate(token)
    assert (me.user, me.tenant, me.role, me.token_id) == (
        "alice",
        "physics",
        Role.TENANT_ADMIN,
        row.id,
    )
    assert me.at_least(Role.USER) and me.at_least(Role.TENANT_ADMIN)
    assert not me.at_least(Role.CLUSTER_ADMIN)


def test_wrong_revoked_and_expired_tokens(auth: Authenticator) -> None:
    token, _ = auth.issue(TokenKind.USER, user="a", tenant="t", role="user", expires_in_s=10)
    with pytest.raises(AuthError, match="required"):
        auth.authenticate(None)
    with pytest.raises(AuthError, match="invalid"):
        auth.authenticate(token[:-2] + ("xy" if not token.endswith("xy") else "zz"))
    with pytest.raises(AuthError, match="invalid"):
        auth.authenticate("fsk_0123456789abcdef_" + "a" * 43)
    assert auth.authenticate(token).user == "a"
    auth.now[0] += 11  # type: ignore[attr-defined]
    with pytest.raises(AuthError, match="expired"):
        auth.authenticate(token)
    other, other_row = auth.issue(TokenKind.USER, user="b", tenant="t", role="user")
    auth.store.revoke_token(other_row.id)
    with pytest.raises(AuthError, match="revoked"):
        auth.authenticate(other)


def test_machine_principals(auth: Authenticator) -> None:
    agent = auth.authenticate(auth.issue_agent("node-a"))
    assert (agent.role, agent.node, agent.person) == (Role.AGENT, "node-a", False)
    job = auth.authenticate(auth.issue_job("7", "alice", "physics"))
    assert (job.role, job.job_id, job.person) == (Role.JOB, "7", False)
    assert not job.at_least(Role.USER)
    join, _ = auth.issue(TokenKind.JOIN, node="node-b")
    joining = auth.authenticate(join)
    assert joining.role is Role.JOIN
    credential = auth.join(joining, "node-b")
    assert credential is not None and auth.authenticate(credential).node == "node-b"
    assert auth.join(joining, "node-b") is None  # used
    with pytest.raises(AuthError, match="already used"):
        auth.authenticate(join)


def test_a_user_token_with_an_unknown_role_is_a_plain_user(auth: Authenticator) -> None:
    token, _ = auth.issue(TokenKind.USER, user="x", tenant="t", role="root")
    assert auth.authenticate(token).role is Role.USER


def test_disabled_authentication_lets_everyone_in() -> None:
    with Store("sqlite://") as store:
        off = Authenticator(store, enabled=False)
        assert off.authenticate(None) is ANONYMOUS
        assert off.authenticate("garbage") is ANONYMOUS
        assert ANONYMOUS.role is Role.CLUSTER_ADMIN
