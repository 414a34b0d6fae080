"""Who sees what of ``GET /v1/queues`` and ``GET /v1/fairshare``: cluster-admins everything,
others their own tenant's quotas and branch of the fair-share tree (users without the other
users' rows)."""

from __future__ import annotations

from fusesched.api.queues import visible_queues, visible_shares
from fusesched.api.schemas import FairShareRow, QueueView, QuotaCell
from fusesched.controller.auth import ANONYMOUS, Principal, Role

CELL = QuotaCell(
    flavor="cpu", resource="cpu", nominal="4", used="1", borrowed="0", available="3", fraction=0.25
)
QUEUES = [
    QueueView(name="big", tenant="biology", cohort="c", pending=2, running=1, quota=[CELL]),
    QueueView(name="small", tenant="physics", cohort="c", pending=0, running=3, quota=[CELL]),
]
ACCOUNTS = [
    "lab",
    "lab/biology",
    "lab/biology/big",
    "lab/biology/big/carol",
    "lab/physics",
    "lab/physics/small",
    "lab/physics/small/alice",
    "lab/physics/small/bob",
    "other",
    "other/chem",
]
ROWS = [
    FairShareRow(account=a, depth=a.count("/") + 1, shares=1, norm_shares=1, usage=0, norm_usage=0)
    for a in ACCOUNTS
]


def who(role: Role, user: str = "alice", tenant: str = "physics") -> Principal:
    return Principal(user=user, tenant=tenant, role=role, token_id="t")


def test_cluster_admins_and_an_open_controller_see_everything() -> None:
    for p in (who(Role.CLUSTER_ADMIN), ANONYMOUS):
        assert visible_queues(QUEUES, p) == QUEUES
        assert visible_shares(ROWS, p) == ROWS


def test_others_see_their_own_tenants_quotas_and_only_counts_of_the_rest() -> None:
    for role in (Role.USER, Role.TENANT_ADMIN):
        big, small = visible_queues(QUEUES, who(role))
        assert (big.name, big.pending, big.running) == ("big", 2, 1)
        assert big.tenant is None and big.quota == [] and big.cohort is None
        assert small == QUEUES[1]


def test_a_user_sees_its_branch_of_the_tree_without_other_users() -> None:
    seen = [r.account for r in visible_shares(ROWS, who(Role.USER))]
    assert seen == ["lab", "lab/physics", "lab/physics/small", "lab/physics/small/alice"]


def test_a_tenant_admin_sees_its_whole_tenant() -> None:
    seen = [r.account for r in visible_shares(ROWS, who(Role.TENANT_ADMIN, user="boss"))]
    assert seen == [
        "lab",
        "lab/physics",
        "lab/physics/small",
        "lab/physics/small/alice",
        "lab/physics/small/bob",
    ]


def test_a_tenant_outside_the_tree_sees_nothing() -> None:
    assert visible_shares(ROWS, who(Role.USER, tenant="nowhere")) == []
