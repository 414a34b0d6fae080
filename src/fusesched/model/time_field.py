"""The request models' field for a time (:data:`UnixTime`), bounded by
:data:`fusesched.model.times.LATEST_TIME`. Apart from the bound, so that reading the bound does
not load pydantic (the client commands that print times need none of it)."""

from __future__ import annotations

from typing import Annotated

from pydantic import Field

from fusesched.model.times import LATEST_TIME

#: a time in Unix seconds that dates can be made of
UnixTime = Annotated[float, Field(ge=0, le=LATEST_TIME)]
