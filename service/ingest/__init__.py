"""What a push must pass before its rows reach the detectors: the per-token rate limits and the
count of pushes refused (``limits``), and where a scoped token's job runs now, asked of its
scheduler (``scope``). ``api/ingest.py`` runs the checks in order; this room sits below the API
and knows nothing of it.
"""
