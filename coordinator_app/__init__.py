"""The coordinator's REST application (Flask app factory)."""
