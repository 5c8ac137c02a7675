"""Which admitted workloads give way: classical and fair-sharing preemption, progress-aware preemption, and the parking of heads that can neither fit nor preempt."""
