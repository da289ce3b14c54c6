"""Alerting: incidents leave through a durable outbox to Alertmanager and direct webhooks.

``sync`` derives trigger/resolve events from the incidents table, ``outbox`` stores them until
delivered, ``dispatcher`` delivers them, and one module per receiver type renders the payload.
"""
