"""The "maintain a repository" use case's contract (no Prefect): ``request`` is what one ``maintain-repo`` run is
asked to do. The work itself is the repository's own (``movers.repo.retention``, ``prune``, ``movers.pipeline.verify``).
"""
