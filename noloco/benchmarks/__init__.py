"""Every benchmark of the toolkit in one place, with one timer (:mod:`noloco.benchmarks.timer`) and one
JSON result per run (machine, versions, load average): ``python -m benchmarks NAME [--json]``."""
