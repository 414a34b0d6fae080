"""The base of the submission models: a request is data a user wrote, so a field nobody defined
is a typo to report, not something to drop; a request once validated never changes; an
infinite or NaN number and a NUL character (the store cannot keep one) are refused."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, field_validator

from fusesched.model.text import refuse_nul


class StrictModel(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)

    @field_validator("*")
    @classmethod
    def _no_nul(cls, value: object) -> object:
        """No field holds a NUL character (the store cannot keep one)."""
        return refuse_nul(value)
