"""Host telemetry: RDMA ports from sysfs and ethtool, served by a per-host agent.

``agent_server`` runs on each host, ``agent_client`` in the service, and ``agent_wire`` is
the format between them; ``sysfs`` and ``ethtool`` read the host; ``config`` is the source's
configuration (``type: agent``).
"""
