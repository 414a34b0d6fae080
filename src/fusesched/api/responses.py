"""How the API answers besides a route's return value: the JSON fast path, the HTTP errors the
routes raise, and the handlers that turn the domain's exceptions into HTTP statuses."""

from __future__ import annotations

from fastapi import FastAPI, HTTPException, Request
from fastapi.responses import JSONResponse, Response
from pydantic import BaseModel

from fusesched.controller.auth import AuthError
from fusesched.controller.records import NotReadyError
from fusesched.submit.errors import SubmitError


def json_response(model: BaseModel, status: int = 200) -> Response:
    """``model`` as the response, serialised once: the hottest routes (submissions, agents'
    heartbeats) skip FastAPI's second validation of what they return (the route's
    ``response_model`` still documents it)."""
    return Response(model.model_dump_json(), status_code=status, media_type="application/json")


def unauthorized(message: str) -> HTTPException:
    return HTTPException(401, message, headers={"WWW-Authenticate": "Bearer"})


def forbidden(message: str) -> HTTPException:
    return HTTPException(403, message)


def add_error_handlers(app: FastAPI) -> None:
    """A bad submission is a 400, a controller still starting a 503, a bad token a 401."""

    @app.exception_handler(SubmitError)
    async def _submit_error(_: Request, exc: SubmitError) -> JSONResponse:
        return JSONResponse(status_code=400, content={"detail": str(exc)})

    @app.exception_handler(NotReadyError)
    async def _not_ready(_: Request, exc: NotReadyError) -> JSONResponse:
        return JSONResponse(status_code=503, content={"detail": str(exc)})

    @app.exception_handler(AuthError)
    async def _auth_error(_: Request, exc: AuthError) -> JSONResponse:
        return JSONResponse(
            status_code=401, content={"detail": str(exc)}, headers={"WWW-Authenticate": "Bearer"}
        )
