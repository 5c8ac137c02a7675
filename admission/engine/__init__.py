"""The scheduling engine: pure, synchronous, no I/O.

The cache (:mod:`.cache`) holds the cohort tree, the pending queues and admitted
workloads; :mod:`.scheduler` runs one cycle over it, with :mod:`.flavors` choosing a
flavor per resource, :mod:`.preemption` and :mod:`.fair_sharing` choosing victims, and
:mod:`.usage` tracking decayed usage for admission fair sharing and credits. Every
driver (``plan``, ``simulate``, ``serve``, the webhook's what-if) runs this same code.
"""
