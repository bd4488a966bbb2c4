"""The model endpoint.

The OpenAI-compatible client and the request body it sends; SDK objects never leave this
room.
"""
