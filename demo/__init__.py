"""The demo and the UI tooling, apart from the product and from the cluster double: ``demo`` (``make demo``: the
whole story on the local cluster), ``demo_app`` (the application the demo backs up, run in the local cluster's
pods), ``screenshots`` (``make screenshots``), ``headless`` (Chromium over the DevTools pipe) and ``pngstats``.
It imports ``flows`` and ``localcluster``; neither of them imports it."""
