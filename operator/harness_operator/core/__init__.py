"""The functional core (pure): resolution, invocation, inputs, naming, desired children, egress, status and
conditions, decisions, budgets and the fair queue."""
