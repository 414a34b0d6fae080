"""Times a request may name: Unix seconds from 1970 to the end of year 9999 (UTC).

Beyond that, Python cannot turn a time into a date (``OverflowError`` in ``time.localtime``
and ``datetime.fromtimestamp``), so a reason or a table that shows it would fail: request
models bound their times with :data:`fusesched.model.time_field.UnixTime` and say why at once
instead.
"""

from __future__ import annotations

from typing import Final

#: 9999-12-31 23:59:59 UTC
LATEST_TIME: Final = 253_402_300_799.0
