"""What ``/metrics`` exports, read from what others hold; nothing here computes a figure.

``exporter`` renders the published fabric state (``service.state``, where every figure is
computed); ``ports`` names the per-port series; ``exposition`` writes the large families from
numpy arrays, off the event loop; ``drain``, ``alerts`` and ``cluster`` read their state at
scrape time.
"""
