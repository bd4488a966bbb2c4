"""One round as a pipeline.

Pre-gate, state, context, request, model, reply, gate, delivery handoff, record.
"""
