"""MultiKueue, the manager side: worker clusters reached by kubeconfig Secrets
(:mod:`.kubeconfig`, :mod:`.remote`, :mod:`.clusters`), the admission-check controller
``kueue.x-k8s.io/multikueue`` that dispatches a Workload holding quota on the manager
to the workers and follows it there (:mod:`.dispatch`, :mod:`.dispatchers`), the job
kinds' remote copies (:mod:`.adapters`, pod groups in :mod:`.pods`, StatefulSets and
LeaderWorkerSets in :mod:`.serving`, one worker for a LeaderWorkerSet's groups in
:mod:`.components`), and the loop that runs them (:mod:`.manager`).
"""
