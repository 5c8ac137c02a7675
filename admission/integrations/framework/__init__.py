"""What every job kind shares: the integration interface, the registry, what a podSet asks, which children an owner may have, and whose an object is."""
