"""Fake agent CLIs executed as real processes by the runner tests."""
