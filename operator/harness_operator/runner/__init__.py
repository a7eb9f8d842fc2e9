"""The runner: executes one attempt of a HarnessRun, in the sandbox pod and on a laptop (package).

Pure pieces: `plan` (what to run), `parsers` (what the CLI reported), `cost`, `result`, `frame`,
`status`. I/O pieces: `executor` (the process), `local` (`harnessctl run`), `__main__` (the pod).
"""
