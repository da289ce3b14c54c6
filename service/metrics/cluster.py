"""``graywire_cluster_*``: this replica's part in the cluster, read from the node at scrape time.

Every replica exports these (its own scrapes and publishing, its view of the members and of the
lease); the leader adds what its loop judged. The fabric's own families (ports, targets,
incidents) come from the leader alone, so a failover moves them to another ``instance``: a
dashboard that must not care which replica leads aggregates ``without (instance)``.
"""

from __future__ import annotations

from collections.abc import Iterator

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.registry import Collector

from graywire.service.cluster.forward import LeaderRelay
from graywire.service.cluster.leader import DROP_REASONS
from graywire.service.cluster.node import ClusterNode


class ClusterExporter(Collector):
    def __init__(self, node: ClusterNode, forward: LeaderRelay | None = None) -> None:
        self.node = node
        self.forward = forward

    def collect(self) -> Iterator[GaugeMetricFamily | CounterMetricFamily]:
        node = self.node
        view = node.view
        yield GaugeMetricFamily(
            "graywire_cluster_leader", "1 while this replica holds the decision lease, else 0.",
            value=1 if node.is_leader else 0,
        )  # fmt: skip
        yield GaugeMetricFamily(
            "graywire_cluster_fencing_token",
            "The lease's fencing token as this replica last read it: one more at every change of leader.",
            value=view.token or 0,
        )
        yield GaugeMetricFamily(
            "graywire_cluster_members", "Live members (heartbeat within cluster.member_ttl).",
            value=len(view.members),
        )  # fmt: skip
        yield GaugeMetricFamily(
            "graywire_cluster_targets_owned", "Targets this replica scrapes now.", value=len(node.share())
        )
        yield GaugeMetricFamily(
            "graywire_cluster_nats_connected",
            "1 while the NATS connection is up.",
            value=int(node.bus.connected),
        )
        m = node.member_stats
        scrapes = CounterMetricFamily(
            "graywire_cluster_scrapes",
            "Scrapes this replica made of its share, by source and result (ok, failed, backoff: not tried).",
            labels=["source", "result"],
        )
        for (source, result), n in sorted(m.scrapes.items()):
            scrapes.add_metric([source, result], n)
        yield scrapes
        yield CounterMetricFamily(
            "graywire_cluster_unpublished_scrapes",
            "Scrapes that could not be published to NATS (their targets go stale on the leader).",
            value=m.unpublished,
        )
        yield CounterMetricFamily(
            "graywire_cluster_published_bytes", "Bytes of scrapes published to NATS.", value=m.published_bytes
        )
        yield GaugeMetricFamily(
            "graywire_cluster_slot_seconds",
            "Seconds this replica's last poll slot took to scrape and publish its share.",
            value=m.last_slot_seconds,
        )
        yield CounterMetricFamily(
            "graywire_cluster_fence_refusals",
            "Writes the database refused this replica: it wrote under a lease it had lost.",
            value=node.fence.refusals,
        )
        yield CounterMetricFamily(
            "graywire_cluster_takeovers", "Times this replica took the lead.", value=node.takeovers
        )
        yield CounterMetricFamily(
            "graywire_cluster_stepdowns",
            "Times this replica stopped leading (lease lost, unrenewable, or a write refused).",
            value=node.stepdowns,
        )
        if self.forward is not None:
            relayed = CounterMetricFamily(
                "graywire_cluster_forwarded_requests",
                "Requests relayed to the leader, by outcome (failed: no leader known or reachable).",
                labels=["outcome"],
            )
            relayed.add_metric(["relayed"], self.forward.forwarded)
            relayed.add_metric(["failed"], self.forward.failed)
            yield relayed
        lead = node.leader_stats
        if lead is None or not node.is_leader:
            return
        yield CounterMetricFamily(
            "graywire_cluster_polls_judged", "Poll slots this term judged.", value=lead.slots_judged
        )
        yield GaugeMetricFamily(
            "graywire_cluster_warmup_polls",
            "Polls this term replayed from the stream to warm its detectors up.",
            value=lead.slots_warmed,
        )
        yield GaugeMetricFamily(
            "graywire_cluster_judged_slot_timestamp_seconds",
            "The newest poll slot judged (unix time): far behind the clock, the leader is catching up.",
            value=lead.last_slot,
        )
        dropped = CounterMetricFamily(
            "graywire_cluster_reports_dropped",
            "Scrape reports the leader did not judge, by reason.",
            labels=["reason"],
        )
        for reason in DROP_REASONS:
            dropped.add_metric([reason], lead.dropped.get(reason, 0))
        yield dropped
