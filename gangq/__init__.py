"""gangq: batch queueing and whole-gang admission for Kubernetes JobSets."""

__version__ = "0.1.0"
