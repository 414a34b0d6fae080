"""How the API answers besides a route's return value: the JSON fast path, the HTTP errors the
routes raise, and the handlers that turn the domain's exceptions into HTTP statuses."""

from __future__ import annotations

import math
from typing import Any

from fastapi import FastAPI, HTTPException, Request
from fastapi.encoders import jsonable_encoder
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, Response
from pydantic import BaseModel

from fusesched.controller.auth import AuthError
from fusesched.controller.records import NotReadyError
from fusesched.submit.errors import SubmitError


def json_response(model: BaseModel, status: int = 200, exclude: set[str] | None = None) -> Response:
    """``model`` as the response (less the fields in ``exclude``), serialised once: the
    hottest routes (submissions, agents' heartbeats) skip FastAPI's second validation of what
    they return (the route's ``response_model`` still documents it)."""
    body = model.model_dump_json(exclude=exclude)
    return Response(body, status_code=status, media_type="application/json")


def unauthorized(message: str) -> HTTPException:
    return HTTPException(401, message, headers={"WWW-Authenticate": "Bearer"})


def forbidden(message: str) -> HTTPException:
    return HTTPException(403, message)


#: The refusals the app's exception handlers answer with :func:`refusal`.
HANDLED = (SubmitError, NotReadyError, AuthError)
#: The refusals :func:`refusal` answers: those and FastAPI's own.
REFUSALS = (HTTPException, *HANDLED)


def refusal(exc: Exception) -> JSONResponse:
    """The answer to a refused request: an :class:`HTTPException` as FastAPI answers it, a bad
    submission 400, a controller still starting 503, a bad token 401."""
    if isinstance(exc, HTTPException):
        return JSONResponse({"detail": exc.detail}, exc.status_code, headers=exc.headers)
    if isinstance(exc, SubmitError):
        return JSONResponse({"detail": str(exc)}, 400)
    if isinstance(exc, NotReadyError):
        return JSONResponse({"detail": str(exc)}, 503)
    if isinstance(exc, AuthError):
        return JSONResponse({"detail": str(exc)}, 401, headers={"WWW-Authenticate": "Bearer"})
    raise TypeError(f"not a refusal: {exc!r}")


def finite(value: Any) -> Any:
    """``value`` with every NaN or infinite float written as a string (``"inf"``): JSON has no
    such numbers, and a request may carry them (Python's JSON reads ``NaN``, ``1e400``). So
    with a lone surrogate (``"\\ud800"`` in a request), which UTF-8 cannot carry: U+FFFD."""
    if isinstance(value, float) and not math.isfinite(value):
        return str(value)
    if isinstance(value, str):
        return value.encode("utf-16", "surrogatepass").decode("utf-16", "replace")
    if isinstance(value, dict):
        return {finite(k): finite(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [finite(v) for v in value]
    return value


def add_error_handlers(app: FastAPI) -> None:
    """A bad submission is a 400, a controller still starting a 503, a bad token a 401
    (:func:`refusal`); a request that fails validation FastAPI's 422, also when the input it
    echoes holds a number JSON cannot write."""

    async def handle(_: Request, exc: Exception) -> JSONResponse:
        return refusal(exc)

    async def invalid(_: Request, exc: Exception) -> JSONResponse:
        assert isinstance(exc, RequestValidationError)
        return JSONResponse({"detail": finite(jsonable_encoder(exc.errors()))}, 422)

    for kind in HANDLED:
        app.add_exception_handler(kind, handle)
    app.add_exception_handler(RequestValidationError, invalid)
