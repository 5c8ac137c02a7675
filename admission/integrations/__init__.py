"""Job kinds Quartermaster admits, as pure conversions from the object to Workload
pod sets (no API calls: the Kubernetes adapter drives them)."""
