"""The real-control-plane tier: its ``control_plane`` fixture is the session's, in ``tests/conftest.py``."""
