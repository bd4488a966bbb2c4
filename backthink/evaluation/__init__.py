"""Judgment you can measure: scenarios, their runs through the real pipeline, and the figures."""
