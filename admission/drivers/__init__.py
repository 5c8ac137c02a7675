"""Offline drivers of the engine: reading objects from files (:mod:`.loader`), one
``plan`` run (:mod:`.plan`), and the what-if shared by ``plan --what-if`` and the quota
webhook (:mod:`.whatif`, :mod:`.impact`)."""
