"""Judging work: running gates, the evaluation queue and its verdicts, drift, and where a gate broke."""
