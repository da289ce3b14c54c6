"""What a push must pass before its rows reach the detectors: :class:`admission.Admission` runs
every check in order and keeps their state; the per-token rate limits and the count of pushes
refused are in ``limits``, and where a scoped token's job runs now, asked of its scheduler, in
``scope``. This room sits below the API that reads requests into it, and hands what passes to
the poll loop, which it knows only as a protocol (``PushSink``).
"""
