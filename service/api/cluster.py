"""``/api/v1/cluster``: the replicas, who leads, and who scrapes how many targets (any replica
answers from its own view; without ``cluster:`` it says so)."""

from __future__ import annotations

from fastapi import APIRouter

from graywire.service.api.deps import ServicesDep
from graywire.service.api.schemas import ClusterMemberOut, ClusterOut

router = APIRouter(prefix="/api/v1", tags=["cluster"])


@router.get("/cluster", response_model=ClusterOut)
async def cluster(s: ServicesDep) -> ClusterOut:
    """The cluster as this replica last saw it (refreshed every few seconds)."""
    node = s.cluster
    if node is None:
        return ClusterOut(enabled=False)
    view = node.view
    per_member = node.assignment()
    return ClusterOut(
        enabled=True,
        member_id=node.member_id,
        role="leader" if node.is_leader else "follower",
        leader=view.leader if view.lease_live else None,
        leader_url=view.leader_url if view.lease_live else None,
        fencing_token=view.token,
        members=[
            ClusterMemberOut(
                member_id=m.member_id,
                url=m.url,
                lead=m.lead,
                collect=m.collect,
                targets=per_member.get(m.member_id, 0),
                leader=m.member_id == view.leader and view.lease_live,
            )
            for m in view.members
        ],
        targets_owned=len(node.share()),
        targets=len(node.runner.targets),
        fence_refusals=node.fence.refusals,
        takeovers=node.takeovers,
        nats_connected=node.bus.connected,
    )
