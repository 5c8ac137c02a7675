"""What every job kind shares: the integration interface, the Workload composed from it, what a podSet asks and which children an owner may have."""
