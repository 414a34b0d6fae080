"""The token routes: admins make, list and revoke API tokens (cluster-admins any token,
tenant-admins the user tokens of their tenant); every change goes to the audit log."""

from __future__ import annotations

from fastapi import FastAPI, HTTPException

from fusesched.api.access import Access, Caller
from fusesched.api.responses import forbidden
from fusesched.api.schemas import TokenCreate, TokenCreated, TokenRevoked, TokenView
from fusesched.controller.auth import Principal, Role
from fusesched.store import TokenKind, TokenRow


def _token_view(row: TokenRow) -> TokenView:
    return TokenView(
        id=row.id,
        kind=row.kind.value,
        user=row.user,
        tenant=row.tenant,
        role=row.role,
        node=row.node,
        job_id=row.job_id,
        created_at=row.created_at,
        expires_at=row.expires_at,
        used_at=row.used_at,
        revoked=row.revoked,
    )


def add_token_routes(app: FastAPI, access: Access) -> None:
    """Serve ``/v1/tokens`` from ``app``."""
    controller = access.controller
    checker = access.auth

    @app.post("/v1/tokens", status_code=201, response_model=TokenCreated, tags=["tokens"])
    def create_token(body: TokenCreate, p: Caller) -> TokenCreated:
        """Cluster-admins make any token; tenant-admins make user tokens of their tenant."""
        if not checker.enabled:
            raise HTTPException(409, "authentication is off on this controller")
        if p.role is Role.CLUSTER_ADMIN:
            tenant = body.tenant or p.tenant or "default"
        elif p.role is Role.TENANT_ADMIN:
            if body.kind != "user" or body.role != Role.USER.value:
                raise forbidden("a tenant-admin may only make tokens with the role user")
            if body.tenant and body.tenant != p.tenant:
                raise forbidden(f"you cannot make tokens for tenant {body.tenant!r}")
            tenant = p.tenant
        else:
            raise forbidden("only admins may make tokens")
        if body.kind == "user":
            if not body.user:
                raise HTTPException(400, "a user token needs a user name")
            token, row = checker.issue(
                TokenKind.USER,
                user=body.user,
                tenant=tenant,
                role=body.role,
                expires_in_s=body.expires_in_s,
            )
        else:
            token, row = checker.issue(
                TokenKind.JOIN, role=Role.JOIN.value, node=body.node, expires_in_s=body.expires_in_s
            )
        access.audit(
            p,
            "token-create",
            token_id=row.id,
            kind=row.kind.value,
            user=row.user,
            tenant=row.tenant,
            token_role=row.role,
            node=row.node,
        )
        return TokenCreated(token=token, **_token_view(row).model_dump())

    def managed(p: Principal) -> str | None:
        """The tenant whose user tokens ``p`` manages (``None``: every token); 403 if none."""
        if checker.enabled and p.role is Role.CLUSTER_ADMIN:
            return None
        if checker.enabled and p.role is Role.TENANT_ADMIN:
            return p.tenant
        if not checker.enabled:
            raise HTTPException(409, "authentication is off on this controller")
        raise forbidden("only admins may manage tokens")

    @app.get("/v1/tokens", response_model=list[TokenView], tags=["tokens"])
    def list_tokens(
        p: Caller,
        kind: TokenKind | None = None,
        include_revoked: bool = False,
    ) -> list[TokenView]:
        tenant = managed(p)
        if tenant is not None:
            if kind not in (None, TokenKind.USER):
                return []
            kind = TokenKind.USER
        rows = controller.persist.store.list_tokens(
            kind=kind, tenant=tenant, include_revoked=include_revoked
        )
        return [_token_view(r) for r in rows]

    @app.delete("/v1/tokens/{token_id}", response_model=TokenRevoked, tags=["tokens"])
    def revoke_token(token_id: str, p: Caller) -> TokenRevoked:
        tenant = managed(p)
        row = controller.persist.store.get_token(token_id)
        mine = row is not None and (
            tenant is None or (row.kind is TokenKind.USER and row.tenant == tenant)
        )
        if row is None or not mine:
            raise HTTPException(404, f"no token {token_id!r}")
        if not row.revoked:  # revoking again changes nothing and is not audited again
            controller.persist.store.revoke_token(token_id)
            access.audit(p, "token-revoke", token_id=token_id, kind=row.kind.value, user=row.user)
        return TokenRevoked(revoked=token_id)
