"""What a round remembers.

Recall's terms and scores, the memory block of the request, the journal of thoughts.
"""
