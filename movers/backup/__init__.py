"""The "back up an application" use case, written against ``movers.kube``'s primitives (no Prefect: the flows
and tasks call these), in the order a run takes its steps:

``preflight`` checks the run before anything is frozen or created and picks the snapshot path; ``snapshots``
cuts the snapshot set under a bounded freeze (and keeps or deletes it after the run); ``bases`` says whether a
backup's recorded snapshot can still be a delta's base; ``plan`` decides per volume what its mover does;
``movers`` makes the mover claim and pod of a volume and runs it.
"""
