"""``simulate``: the engine on a simulated clock — scenarios and traces in, metrics and
a report out."""
