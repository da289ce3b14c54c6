"""The HTTP API under ``/api/v1``: one router per resource, their records, their dependencies.

``main.api_router`` gathers the routers; ``schemas`` holds every request and response record;
``deps`` the Annotated dependencies that hand a route the service's parts.
"""
