"""What the operator and the sandbox exchange: the attempt plan, the result document, run events and the
output frame (pydantic and plain data, versioned, no I/O)."""
