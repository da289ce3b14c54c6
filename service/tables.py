"""Every table graywire keeps, in one metadata: what migrations compare and create against.

The tables live beside the code that uses them (``graywire.service.db`` for incidents, drains and
audit, ``graywire.service.alerts.models`` for the alert outbox); importing this module loads them all,
so no table module has to import another to be seen.
"""

from __future__ import annotations

import graywire.service.alerts.models  # noqa: F401  (the alert tables join Base.metadata)
from graywire.service.db import Base

metadata = Base.metadata
