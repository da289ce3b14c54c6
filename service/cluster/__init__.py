"""Several replicas of one graywire: collection shared through NATS JetStream, decisions by
one leader through PostgreSQL (docs/architecture.md, Replicas).

- ``membership.py``, ``lease.py``, ``fence.py``: membership heartbeats, the leader's lease and
  its fencing token, the token carried by every deciding write (all in PostgreSQL, on its clock);
- ``shard.py``: which member scrapes which target (rendezvous hashing; pure);
- ``wire.py``: a scrape as NATS messages (Arrow IPC, chunked) and back (pure); ``bus.py``: the
  stream, its consumers and the publishing (I/O);
- ``member.py``: every member's loop (scrape its share each poll, publish);
- ``leader.py``: the leader's loop (take over, warm the detectors up, judge each poll);
- ``node.py``: one replica's part in it all, as the app runs it; ``forward.py``: requests only
  the leader can answer, passed on to it.

Without ``cluster:`` in the settings none of this runs: one process does everything in memory.
"""
