"""Reading the model's reply and deciding what reaches the owner.

Footer and JSON parsing, the echo guards, the push gate, quiet hours.
"""
