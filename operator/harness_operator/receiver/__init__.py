"""The trigger receiver: a program of its own (python3 -m harness_operator.receiver) that turns forges'
webhook deliveries into HarnessRuns, created as each HarnessTrigger's ServiceAccount."""
