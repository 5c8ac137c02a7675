"""One reconciler per concern: Workloads of jobs and pod groups, admission writes, queue status, notices, waitForPodsReady, topology, CA bundles."""
