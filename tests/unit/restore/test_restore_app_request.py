"""``movers.restore.app_request.RestoreAppRequest``: the ``restore-app`` run's one typed request (pure: no cluster,
no Prefect)."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from pydantic import ValidationError

from movers.restore.app_request import DEFAULT_REPO_SECRET, RestoreAppRequest

ROOT = Path(__file__).resolve().parents[3]


def test_the_target_is_the_source_namespace_unless_another_is_given():
    same = RestoreAppRequest(repo="s3://b", namespace="shop")
    assert same.target == "shop" and same.model_copy(update={"target_namespace": "copy"}).target == "copy"


def test_only_the_writer_settings_given_are_merged_over_a_policy():
    request = RestoreAppRequest(repo="s3://b", namespace="shop", image="cbt-mover:1", node_selector={"pool": 7})
    assert request.writer_given() == {"image": "cbt-mover:1", "node_selector": {"pool": "7"}}


def test_the_plan_options_carry_the_request_and_the_resolved_service_account():
    request = RestoreAppRequest(repo="s3://b", namespace="shop", overwrite=True, storage_class="fast")
    options = request.options("writer-sa")
    assert (options.overwrite, options.storage_class, options.repo_secret, options.service_account) == (
        True,
        "fast",
        DEFAULT_REPO_SECRET,
        "writer-sa",
    )


def test_the_default_repository_secret_is_the_one_the_shipped_controller_role_may_read():
    """A run that names no ``repo_secret`` reads the Secret the controller's ClusterRole grants by name."""
    docs = list(yaml.safe_load_all((ROOT / "movers/install/controller.yaml").read_text()))
    granted = {
        name
        for doc in docs
        if doc and doc.get("kind") in ("ClusterRole", "Role")
        for rule in doc.get("rules", [])
        if "secrets" in rule.get("resources", [])
        for name in rule.get("resourceNames", [])
    }
    assert granted == {DEFAULT_REPO_SECRET}


def test_the_request_is_frozen():
    request = RestoreAppRequest(repo="s3://b", namespace="shop")
    with pytest.raises(ValidationError):
        request.namespace = "other"  # type: ignore[misc]


def test_scale_down_needs_in_place_or_overwrite_and_reaches_the_plan():
    with pytest.raises(ValidationError, match="scale_down stops the workloads .* it needs in_place or overwrite"):
        RestoreAppRequest(repo="s3://b", namespace="shop", scale_down=True)
    request = RestoreAppRequest(repo="s3://b", namespace="shop", in_place=True, scale_down=True)
    assert request.options("writer-sa").scale_down is True
    replacing = RestoreAppRequest(repo="s3://b", namespace="shop", overwrite=True, scale_down=True)
    assert replacing.options("writer-sa").scale_down is True
    assert RestoreAppRequest(repo="s3://b", namespace="shop", in_place=True).options("sa").scale_down is False
