"""What one turn offers the model, lets it emit, and leaves in memory.

- `intents`        what is on the table this turn: the intents offered, and requests refused
- `deals`          requests the rules decide: the sale or the decline, and why
- `transcript`     an exchange as memory writes it and as the next prompt reads it back
- `output_schema`  the JSON shape (and grammar) the model's reply must take
"""
