"""Test helpers: a running ``KubeAPI`` with a kubeconfig and a real ``kubernetes`` client on it.

    with serve(tmp_path) as kube:       # keyword arguments go to KubeAPI
        kube.core.list_namespace()      # CoreV1Api; also .custom, .storage, .authn, .rbac, .client (admin)
        kube.grant("ns", "ns/sa", [{"apiGroups": [""], "resources": ["pods"], "verbs": ["get"]}])
        with kube.as_service_account("ns", "sa") as api_client:   # a client with that account's token
            ...

The clients are closed and the server stopped in every outcome.
"""

from __future__ import annotations

import contextlib
import json
import urllib.error
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from localcluster.kubeapi.emulator import KubeAPI

RBAC = "rbac.authorization.k8s.io"


@dataclass
class Kube:
    api: KubeAPI
    kubeconfig: Path
    client: Any  # kubernetes.client.ApiClient

    def raw(
        self, method: str, path: str, body: Any = None, headers: dict[str, str] | None = None, token: str | None = None
    ) -> tuple[int, Any]:
        """A plain HTTP request: (status, parsed JSON body or text)."""
        data = json.dumps(body).encode() if body is not None else None
        hdrs = {
            "Authorization": f"Bearer {token or self.api.token}",
            "Content-Type": "application/json",
            **(headers or {}),
        }
        request = urllib.request.Request(self.api.url + path, data=data, method=method, headers=hdrs)
        try:
            with urllib.request.urlopen(request, timeout=30) as resp:
                status, text = resp.status, resp.read().decode()
        except urllib.error.HTTPError as err:
            status, text = err.code, err.read().decode()
        try:
            return status, json.loads(text)
        except ValueError:
            return status, text

    @property
    def core(self):
        from kubernetes import client

        return client.CoreV1Api(self.client)

    @property
    def custom(self):
        from kubernetes import client

        return client.CustomObjectsApi(self.client)

    @property
    def storage(self):
        from kubernetes import client

        return client.StorageV1Api(self.client)

    @property
    def rbac(self):
        from kubernetes import client

        return client.RbacAuthorizationV1Api(self.client)

    def grant(self, namespace: str, service_account: str, rules: list[dict[str, Any]], name: str = "granted") -> None:
        """A Role ``name`` with ``rules`` in ``namespace`` and a RoleBinding of it to ServiceAccount
        ``service_account`` ("NS/NAME"), created as the admin."""
        sa_ns, sa_name = service_account.split("/", 1)
        self.rbac.create_namespaced_role(namespace, {"metadata": {"name": name}, "rules": rules})
        self.rbac.create_namespaced_role_binding(
            namespace,
            {
                "metadata": {"name": name},
                "roleRef": {"apiGroup": RBAC, "kind": "Role", "name": name},
                "subjects": [{"kind": "ServiceAccount", "name": sa_name, "namespace": sa_ns}],
            },
        )

    @contextlib.contextmanager
    def as_service_account(self, namespace: str, name: str) -> Iterator[Any]:
        """A ``kubernetes`` ApiClient authenticated with a fresh token of that ServiceAccount."""
        with self.as_token(self.api.issue_token(namespace, name)) as api_client:
            yield api_client

    @contextlib.contextmanager
    def as_token(self, token: str | None) -> Iterator[Any]:
        """A ``kubernetes`` ApiClient sending ``token`` (None: no credentials, the anonymous user)."""
        from kubernetes import client

        config = client.Configuration(host=self.api.url)
        if token is not None:
            config.api_key = {"BearerToken": token}
            config.api_key_prefix = {"BearerToken": "Bearer"}
        api_client = client.ApiClient(config)
        try:
            yield api_client
        finally:
            api_client.close()

    @property
    def authn(self):
        from kubernetes import client

        return client.AuthenticationV1Api(self.client)


@contextlib.contextmanager
def serve(tmp_path: str | Path, **settings: Any) -> Iterator[Kube]:
    from kubernetes import config

    with KubeAPI(**settings) as api:
        kubeconfig = api.write_kubeconfig(Path(tmp_path) / "kubeconfig")
        api_client = config.new_client_from_config(str(kubeconfig))
        try:
            yield Kube(api, kubeconfig, api_client)
        finally:
            api_client.close()
