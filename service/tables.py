"""Every table graywire keeps, in one metadata: what migrations compare and create against.

The tables live beside the code that uses them (``service.db`` for incidents, drains and
audit, ``service.alerts.models`` for the alert outbox); importing this module loads them all,
so no table module has to import another to be seen.
"""

from __future__ import annotations

import service.alerts.models  # noqa: F401  (the alert tables join Base.metadata)
from service.db import Base

metadata = Base.metadata
