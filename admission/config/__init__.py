"""The service configuration: Kueue's Configuration plus this project's extensions."""
