"""Generated gRPC code for the KubeVirt launcher contract (see regenerate.py)."""
