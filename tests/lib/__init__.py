"""What the test suites share: the processes they start (processes), the phases of run-all (phases.sh)."""
