"""What the reconcilers share: options, the work queue and the write primitive, leader election, metrics, and which integrations run."""
