"""What one turn offers the model and lets it emit.

- `intents`        what is on the table this turn: the intents offered, and requests refused
- `output_schema`  the JSON shape (and grammar) the model's reply must take
"""
