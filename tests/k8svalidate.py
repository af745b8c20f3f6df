"""Manifests checked as ``kubernetes-validate --strict`` checks them (PyPI ``kubernetes-validate``).

``validate(manifest)`` returns every schema violation of one object (empty: valid) against the OpenAPI
schemas of ``VERSION``, the newest Kubernetes release the installed package ships, in strict mode
(unknown fields are errors, as ``kubectl --validate=strict`` and the API server's strict field
validation make them). Each error is one line ``<kind>/<name>: <path>: <message>``.

Only built-in kinds have a schema there: ``has_schema(manifest)`` says whether one exists, and
``validate`` raises ``kubernetes_validate.SchemaNotFoundError`` for kinds without (CRDs such as
VolumeSnapshot are validated by their CRD schema in the API emulator instead).
"""

from __future__ import annotations

import functools
import re
from collections.abc import Mapping
from typing import Any

import jsonschema
import kubernetes_validate
from kubernetes_validate import utils
from referencing import Registry, Resource

VERSION = kubernetes_validate.latest_version()


def _schema_path(manifest: Mapping[str, Any], version: str) -> tuple[str, str]:
    api_version = re.sub(r"^([^./]*)(?:\.[^/]*)?/", r"\1-", str(manifest.get("apiVersion", "")))
    folder = f"kubernetes-json-schema/v{version}-local-strict"
    return folder, f"{folder}/{str(manifest.get('kind', '')).lower()}-{api_version}.json"


@functools.lru_cache(maxsize=64)
def _validator(schema_file: str, folder: str, version: str) -> jsonschema.Draft202012Validator:
    schema = utils.schema_contents(schema_file, version)
    definitions = utils.schema_contents(f"{folder}/_definitions.json", version)
    registry = Resource.from_contents(definitions) @ (Resource.from_contents(schema) @ Registry())
    return jsonschema.Draft202012Validator(schema, registry=registry)


def has_schema(manifest: Mapping[str, Any], version: str = VERSION) -> bool:
    """Whether kubernetes-validate has a schema for this object's kind and apiVersion."""
    folder, schema_file = _schema_path(manifest, version)
    try:
        _validator(schema_file, folder, version)
    except FileNotFoundError:
        return False
    return True


def validate(manifest: Mapping[str, Any], version: str = VERSION) -> list[str]:
    """Every strict-schema error of ``manifest`` as one line each; [] when it is valid."""
    folder, schema_file = _schema_path(manifest, version)
    try:
        validator = _validator(schema_file, folder, version)
    except FileNotFoundError:
        raise kubernetes_validate.SchemaNotFoundError(
            str(manifest.get("kind")), version, str(manifest.get("apiVersion"))
        ) from None
    meta = manifest.get("metadata") or {}
    name = f"{str(manifest.get('kind')).lower()}/{meta.get('name') or meta.get('generateName') or '?'}"
    errors = sorted(validator.iter_errors(dict(manifest)), key=lambda e: [str(p) for p in e.absolute_path])
    return [f"{name}: {'.'.join(map(str, e.absolute_path)) or '(root)'}: {e.message}" for e in errors]
