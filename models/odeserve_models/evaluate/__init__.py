"""Evaluation: the fixed test sets, the Python path, baselines, the served path over gRPC, translation."""
