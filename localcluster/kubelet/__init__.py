"""A kubelet for the local cluster (never the product): the emulator's pods run as local processes.

``LocalKubelet(api, store, *, node="local-node", images=..., workdir=...)`` with ``start()`` /
``stop()`` (or ``with``) registers its node (``localcluster.nodes.NodeSpec``), watches pods on a
``KubeAPI`` and runs those bound to its node (the scheduler, ``localcluster.controllers.scheduler``,
binds the others): each container as a child process (init containers in order, then the
containers), with the command an image maps to (``images.py``), the environment of the pod spec
(``podenv.py``), its volumes (``volumes.py``; Filesystem volumes formatted and checked by their
PV's fsType, ``mounts.py``) and devices at the paths the spec names (``sandbox.py``/``shim.py``:
a private mount namespace per container where the machine allows, a documented path-rewriting
fallback otherwise), restarts, termination messages and the pod's status (``pods.py``,
``runtime.py``). It serves ``pods/log`` (``logs.py``) and ``pods/exec`` over the websocket
channel protocol (``execs.py``), routed by node when several kubelets share an API
(``routing.py``). ``cluster.py`` is its in-process access to the emulator; ``testing.py`` has
helpers for tests.
"""

from localcluster.kubelet.images import Image, default_images
from localcluster.kubelet.kubelet import LocalKubelet
from localcluster.kubelet.sandbox import DEVICE_MAP_ENV, namespaces_available

__all__ = ["DEVICE_MAP_ENV", "Image", "LocalKubelet", "default_images", "namespaces_available"]
