"""Kueue's scheduler-performance runner, reproduced (``test/performance/scheduler/runner``).

Run as ``python -m bench.kueue_runner --url URL --config GENERATOR.yaml [--token T]
[--ca-file CA]``. It plays the cluster's users against the API server, as Kueue's
runner does against envtest, in its three parts, one module each (each mirrors a file
there):

* :mod:`.generator` (``runner/generator/generator.go``) -- creates the queues, then the
  Workloads at the configured intervals;
* :mod:`.controller` (``runner/controller/controller.go``) -- clears evicted Workloads'
  quota reservations and finishes admitted ones after their running time;
* :mod:`.recorder` (``runner/recorder/recorder.go``) -- integrates ClusterQueue usage,
  times admissions, and says when the run is over.

:mod:`.api` is the few requests they send; :mod:`.__main__` wires the three parts as
the runner's ``main.go`` does and prints the summary.  Plain aiohttp on purpose: the
runner is the cluster's users, not the product.
"""
