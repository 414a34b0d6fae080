"""API tokens in the store: hashes only, one-time join tokens, revocation, listing; and the
tenant filter of the job listing. Each test runs on SQLite and PostgreSQL."""

from __future__ import annotations

import threading

import pytest

from fusesched.store import DuplicateToken, Store, TokenKind, TokenRow
from fusesched.store.job_filters import JobFilters
from store.rows import job


def token(token_id: str, kind: TokenKind = TokenKind.USER, **fields: object) -> TokenRow:
    values: dict[str, object] = {
        "id": token_id,
        "hash": "ab" * 32,
        "kind": kind,
        "created_at": 100.0,
        "user": "alice",
        "tenant": "physics",
        "role": "user",
    }
    values.update(fields)
    return TokenRow(**values)  # type: ignore[arg-type]


def test_a_token_round_trips(store: Store) -> None:
    row = token("t1", expires_at=500.0, node=None, job_id=None)
    store.add_token(row)
    assert store.get_token("t1") == row
    assert store.get_token("nope") is None
    assert store.count_tokens() == 1


def test_a_repeated_token_id_is_refused(store: Store) -> None:
    store.add_token(token("t1"))
    with pytest.raises(DuplicateToken):
        store.add_token(token("t1", user="bob"))
    assert store.get_token("t1") == token("t1")


def test_unknown_token_kinds_are_refused() -> None:
    with pytest.raises(ValueError, match="unknown token kind"):
        token("t1", kind="root")  # type: ignore[arg-type]


def test_a_join_token_is_used_once(store: Store) -> None:
    store.add_token(token("j1", TokenKind.JOIN, node="node-a", role=""))
    used = store.use_join_token("j1", 200.0)
    assert used is not None and used.used_at == 200.0 and used.node == "node-a"
    assert store.use_join_token("j1", 201.0) is None
    stored = store.get_token("j1")
    assert stored is not None and stored.used_at == 200.0 and not stored.usable(300.0)


def test_only_usable_join_tokens_can_be_used(store: Store) -> None:
    store.add_token(token("u1"))  # not a join token
    store.add_token(token("j-old", TokenKind.JOIN, expires_at=150.0))
    store.add_token(token("j-revoked", TokenKind.JOIN))
    store.revoke_token("j-revoked")
    assert store.use_join_token("u1", 100.0) is None
    assert store.use_join_token("j-old", 200.0) is None
    assert store.use_join_token("j-revoked", 100.0) is None
    assert store.use_join_token("missing", 100.0) is None
    assert store.use_join_token("j-old", 120.0) is not None  # before it expired


def test_concurrent_joins_use_a_token_exactly_once(store: Store) -> None:
    store.add_token(token("j1", TokenKind.JOIN))
    results: list[TokenRow | None] = []
    lock = threading.Lock()

    def join() -> None:
        found = store.use_join_token("j1", 200.0)
        with lock:
            results.append(found)

    threads = [threading.Thread(target=join) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sum(r is not None for r in results) == 1


def test_revoking(store: Store) -> None:
    store.add_token(token("t1"))
    assert store.revoke_token("t1")
    assert not store.revoke_token("missing")
    revoked = store.get_token("t1")
    assert revoked is not None and revoked.revoked and not revoked.usable(0.0)


def test_job_tokens_are_revoked_by_job(store: Store) -> None:
    store.add_token(token("a", TokenKind.JOB, job_id="1"))
    store.add_token(token("b", TokenKind.JOB, job_id="2"))
    store.add_token(token("c", TokenKind.JOB, job_id="3"))
    store.add_token(token("u"))
    assert store.revoke_job_tokens([]) == 0
    assert store.revoke_job_tokens(["1", "9"]) == 1
    assert [t.id for t in store.list_tokens(kind=TokenKind.JOB)] == ["b", "c"]
    assert store.revoke_job_tokens() == 2
    assert store.list_tokens(kind="job") == []
    user = store.get_token("u")
    assert user is not None and not user.revoked


def test_listing_tokens(store: Store) -> None:
    store.add_token(token("t1", created_at=1.0))
    store.add_token(token("t2", created_at=2.0, tenant="biology"))
    store.add_token(token("t3", TokenKind.AGENT, created_at=3.0, node="n", tenant=""))
    store.revoke_token("t1")
    assert [t.id for t in store.list_tokens()] == ["t2", "t3"]
    assert [t.id for t in store.list_tokens(include_revoked=True)] == ["t1", "t2", "t3"]
    assert [t.id for t in store.list_tokens(tenant="biology")] == ["t2"]
    assert [t.id for t in store.list_tokens(kind=TokenKind.AGENT)] == ["t3"]
    assert [t.id for t in store.list_tokens(kind="user", include_revoked=True)] == ["t1", "t2"]


def test_usable_checks_expiry_and_use() -> None:
    assert token("t", expires_at=10.0).usable(9.0)
    assert not token("t", expires_at=10.0).usable(10.0)
    assert token("t", used_at=5.0).usable(6.0)  # only join tokens are single use
    assert not token("t", TokenKind.JOIN, used_at=5.0).usable(6.0)


def test_jobs_are_listed_by_tenant(store: Store) -> None:
    store.add_jobs(
        [
            job(1, tenant="physics"),
            job(2, tenant="biology", user="bob"),
            job(3, tenant="physics", user="carol", state="Running"),
            job(4, tenant="physics"),
        ]
    )
    assert [j.id for j in store.list_jobs(JobFilters(tenant="physics"))] == ["4", "3", "1"]
    assert [j.id for j in store.list_jobs(JobFilters(tenant="biology"))] == ["2"]
    assert [j.id for j in store.list_jobs(JobFilters(tenant="physics", users=["alice"]))] == [
        "4",
        "1",
    ]
    assert [j.id for j in store.list_jobs(JobFilters(tenant="biology", users=["alice"]))] == []
    assert [j.id for j in store.list_jobs(JobFilters(tenant="physics", states=["Running"]))] == [
        "3"
    ]
    assert [j.id for j in store.list_jobs(JobFilters(tenant="physics"), before_seq=4, limit=1)] == [
        "3"
    ]
    assert store.list_jobs(JobFilters(tenant="chemistry")) == []


def test_a_tenant_listing_walks_the_tenant_index(tmp_path: object) -> None:
    from fusesched.store.engine import make_engine

    url = f"sqlite:///{tmp_path}/plans.db"
    with Store(url) as store:
        store.add_jobs(job(s, tenant=f"t{s % 3}") for s in range(1, 100))
        engine = make_engine(url)
        sql = (
            "SELECT * FROM jobs WHERE tenant = ? AND state || '' IN (?) ORDER BY seq DESC LIMIT 50"
        )
        with engine.connect() as conn:
            rows = conn.exec_driver_sql(f"EXPLAIN QUERY PLAN {sql}", ("t1", "Pending"))
            plan = " | ".join(r[3] for r in rows)
        engine.dispose()
        assert plan == "SEARCH jobs USING INDEX ix_jobs_tenant_seq (tenant=?)"
        assert len(store.list_jobs(JobFilters(tenant="t1", states=["Pending"]))) == 33
