"""The scheduling engine: pure, synchronous, no I/O.

The cache (:mod:`.cache`) holds the cohort tree, the pending queues and admitted
workloads; :mod:`.scheduler` runs one cycle over it on a :mod:`.snapshot` of the tree,
with :mod:`.flavors` choosing a flavor per resource, :mod:`.preemption` and
:mod:`.fair_sharing` choosing victims, :mod:`.ordering` (or fair sharing's tournament)
ordering the heads, and :mod:`.usage` tracking decayed usage for admission fair sharing
and credits; :mod:`.topology` places the podSets of topology-aware flavors. The words
it decides with are in :mod:`.vocabulary`, the messages it
writes in :mod:`.messages`. Every driver (``plan``, ``simulate``, ``serve``, the
webhook's what-if) runs this same code, built by :mod:`.build` from a plain policy.

The modules are layers, each importing only those below it (import-linter contract
``engine-layers``): build → scheduler → fair_sharing → ordering → preemption → usage | flavors
| checkpoint → cache | snapshot → topology | progress → messages → vocabulary.
"""
