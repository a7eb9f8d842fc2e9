"""Real servers (not mocks) the tests run on this machine: a git smart-HTTP server (git_http)."""
