"""Sizes the API states and the agent container's launcher obeys: plain constants, importable without
pydantic (the launcher runs with none)."""

# The most a session archive (gzip'd tar) may take; a larger session is not kept, and a run continuing it
# gets the earlier prompt and output replayed instead.
SESSION_ARCHIVE_MAX_BYTES = 524288  # its base64 (in a Secret, the launcher's last word) stays under 1 MiB
