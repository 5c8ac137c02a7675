"""The Kubernetes adapter: the only package that imports ``kubernetes``.

``quartermaster serve`` is built from these modules, bottom up:

* :mod:`.client` — a ``kubernetes.aio`` ApiClient with a small raw-dict request layer
  and :data:`.client.API_CALLS`, the one table of every API call the service makes;
* :mod:`.informer` — list-then-watch caches per resource, and :mod:`.slim`, what the
  informers of Jobs, Workloads and Pods keep of each object;
* :mod:`.objects` — pure helpers on raw objects (conditions, Job ⇄ Workload bodies);
* :mod:`.cachesync` — informer events → the engine's ``Cache``;
* :mod:`.context` (options, work queue, the RV-pinned :class:`.context.Writer`),
  :mod:`.jobs`, :mod:`.podgroups`, :mod:`.admit`, :mod:`.podsready`, :mod:`.status`, :mod:`.metrics` —
  the controller's parts; :mod:`.controller` ties them to the scheduler loop;
* :mod:`.leader` — Lease-based leader election;
* :mod:`.integrationgate` — the informers of CRD-backed job kinds, started and stopped
  as their CRDs come and go.

The service that wires them to the webhooks is :mod:`admission.serve`, outside this
package.
"""
