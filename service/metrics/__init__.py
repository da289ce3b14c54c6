"""What ``/metrics`` exports: the service's own series, the drain gauges and the alerting counters.

``exporter`` renders the published fabric state (``service.fabric_state``); ``ports`` and ``nccl`` compute the
per-port and per-channel figures it holds; ``exposition`` writes the large families from numpy
arrays, off the event loop; ``drain`` and ``alerts`` read their state at scrape time.
"""
