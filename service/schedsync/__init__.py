"""Scheduler helpers: make Slurm and Kubernetes follow graywire's drain list.

``drainlist`` reads the list from the graywire API, ``slurm`` and ``k8s`` turn it into
scheduler actions (pure planning functions plus thin adapters), and ``runner`` drives one
pass or a loop with the shared rules: never act when the list cannot be read, only report in
shadow mode or with ``--dry-run``, and only ever undo what graywire itself did.
"""
