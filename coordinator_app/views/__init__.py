"""Blueprints of the coordinator's REST API (one per resource)."""
