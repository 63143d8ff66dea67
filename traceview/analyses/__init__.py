"""Columnar analyses over a Trace: breakdowns, timelines, roofline, layers, communication, the classifier."""
