"""Every table graywire keeps, in one metadata: what the migrations compare and create against.

Importing this package loads them all (``metadata`` is complete), so no table module has to
import another to be seen, and migrations/env.py needs only this.
"""

from graywire.service.models.alerts import (
    ALERT_ACTIONS,
    ALERT_STATES,
    OUTBOX_STATUSES,
    AlertAction,
    AlertState,
    AlertStateName,
    OutboxMessage,
    OutboxStatus,
)
from graywire.service.models.base import Base, FindingId, UTCDateTime, in_check, row_to_dict, to_jsonable
from graywire.service.models.cluster import LEADER_ROW, ClusterLeader, ClusterMember
from graywire.service.models.drain import (
    DRAIN_ACTIONS,
    VERDICT_SIDES,
    AuditEntry,
    DrainAction,
    DrainRecommendation,
    DrainState,
    Exclusion,
    InventoryNode,
    NodeVerdictRecord,
    Silence,
    VerdictSide,
)
from graywire.service.models.incidents import (
    ACTIVE_STATUSES,
    FINDING_STATUSES,
    INCIDENT_STATUSES,
    FindingRecord,
    FindingStatus,
    Incident,
    IncidentStatus,
    LateEpisode,
)

metadata = Base.metadata

__all__ = [
    "ACTIVE_STATUSES", "ALERT_ACTIONS", "ALERT_STATES", "DRAIN_ACTIONS", "FINDING_STATUSES",
    "INCIDENT_STATUSES", "LEADER_ROW", "OUTBOX_STATUSES", "VERDICT_SIDES", "AlertAction", "AlertState",
    "AlertStateName", "AuditEntry", "Base", "ClusterLeader", "ClusterMember", "DrainAction",
    "DrainRecommendation", "DrainState", "Exclusion", "FindingId", "FindingRecord", "FindingStatus",
    "Incident", "IncidentStatus", "InventoryNode", "LateEpisode", "NodeVerdictRecord", "OutboxMessage",
    "OutboxStatus", "Silence", "UTCDateTime", "VerdictSide", "in_check", "metadata", "row_to_dict",
    "to_jsonable",
]  # fmt: skip
