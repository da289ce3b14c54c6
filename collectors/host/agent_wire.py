"""The wire between the host agent and the service: one ``port_sample`` batch as Arrow IPC.

Each GPU host runs ``graywire agent`` (:mod:`~graywire.collectors.host.agent_server`); on every
``GET /v1/port_sample`` it answers with its ports as one canonical ``port_sample`` batch, an
Arrow IPC stream (``application/vnd.apache.arrow.stream``). The service scrapes every agent with
:class:`~graywire.collectors.host.agent_client.AgentCollector`.

Why pull over HTTP: the service already owns schedule, timeouts, retries, backoff and staleness
for every source, and a host that stops answering shows up as a failed, stale target instead of
silence; the agent stays stateless, needs no credentials and no address of the service, and an
operator can ``curl`` it. It is the node_exporter model, which fleet operators already run.

Why Arrow IPC: the agent ships the exact canonical record the detectors consume (schema,
dictionary-encoded port keys, counter widths in the schema metadata), so the service has no
second parser and no unit conversion to get wrong; a host's batch is a few kilobytes and
decodes without copying. The collector still checks the schema, the poll time and the port
keys, and rejects anything else as a failed scrape.
"""

from __future__ import annotations

import pyarrow as pa

ARROW_STREAM = "application/vnd.apache.arrow.stream"
DEFAULT_AGENT_PORT = 9470
#: The ``source`` of an agent's rows, and of the collector that scrapes it.
SOURCE = "agent"
#: Schema metadata of an agent's batch: JSON ``{reason: count}`` of what its parse left out.
SKIPPED_KEY = b"graywire.skipped"


def to_ipc(batch: pa.RecordBatch) -> bytes:
    """One batch as an Arrow IPC stream (schema metadata included)."""
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, batch.schema) as writer:
        writer.write_batch(batch)
    return sink.getvalue().to_pybytes()
