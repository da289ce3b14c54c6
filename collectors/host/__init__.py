"""Host telemetry: RDMA ports from sysfs and ethtool, served by a per-host agent."""
