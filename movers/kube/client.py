"""The one Kubernetes API client builder of the product (flows, tasks and the mover's ``--kube``)."""

from __future__ import annotations


def api_client(kubeconfig: str | None = None):
    """A ``kubernetes.client.ApiClient``: from ``kubeconfig`` when given, else the pod's in-cluster
    ServiceAccount, else the default kubeconfig (``$KUBECONFIG`` or ``~/.kube/config``)."""
    from kubernetes import client, config

    if kubeconfig:
        return config.new_client_from_config(config_file=kubeconfig)
    try:
        config.load_incluster_config()
    except config.ConfigException:
        return config.new_client_from_config()
    return client.ApiClient()
