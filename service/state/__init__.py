"""What the service knows now, and every figure computed from it: the one place reads come from.

``fabric`` holds the published :class:`~graywire.service.state.fabric.FabricState` and the board
the poll writes it through; ``figures`` computes each port's figures, the leaf and rail
aggregates and the sources' raw counters; ``nccl`` the per-channel NCCL snapshot; ``readings``
each port's latest reading from a poll's rates; ``ports`` and ``jobs`` the views the API and
the status page serve; ``read_cache`` the API's rendered answers. ``/metrics``, the API and the
status page only read this package.
"""
