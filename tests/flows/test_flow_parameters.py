"""The flows' parameters are typed with the policy's models: the Prefect UI builds forms from their schema and
a deployment's enforce_parameter_schema (and Prefect's own validation) refuses what a policy would refuse."""

from __future__ import annotations

import pytest
from prefect.exceptions import ParameterTypeError
from prefect.utilities.callables import parameter_schema

from flows.backup import backup_app
from flows.restore import restore_app
from movers.policy.model import Hooks

RESTORE = {"repo": "s3://b", "namespace": "shop", "repo_secret": "creds"}
HOOK = {"name": "freeze", "pod_selector": {"app": "db"}, "command": ["fsfreeze", "--freeze", "/data"]}


def test_backup_hooks_are_a_form_of_pre_and_post_hooks():
    schema = parameter_schema(backup_app).model_dump()
    assert schema["properties"]["overrides"]["anyOf"][0] == {"$ref": "#/definitions/PolicyOverrides"}
    overrides = schema["definitions"]["PolicyOverrides"]
    assert overrides["properties"]["hooks"]["anyOf"][0] == {"$ref": "#/definitions/Hooks"}
    hooks = schema["definitions"]["Hooks"]
    assert set(hooks["properties"]) == {"pre", "post"} and hooks["additionalProperties"] is False
    assert hooks["properties"]["pre"]["items"] == {"$ref": "#/definitions/HookSpec"}, "each hook a form"
    spec = schema["definitions"]["HookSpec"]
    assert set(spec["required"]) == {"name", "pod_selector", "command"}
    assert spec["properties"]["on_error"]["enum"] == ["fail", "continue"]
    assert {"type": "string"} in spec["properties"]["timeout"]["anyOf"], "a Go duration such as 90s is a timeout"
    given = backup_app.validate_parameters({"overrides": {"hooks": {"pre": [HOOK]}}})
    assert given["overrides"].hooks == Hooks(pre=[HOOK])


@pytest.mark.parametrize(
    ("hooks", "words"),
    [
        ({"pre": [HOOK], "prost": []}, "prost"),
        ({"pre": [{**HOOK, "command": "fsfreeze --freeze /data"}]}, "hooks.pre.0.command: must be a list (an argv)"),
        ({"post": [{**HOOK, "on_error": "ignore"}]}, "hooks.post.0.on_error: must be fail or continue"),
    ],
)
def test_backup_refuses_bad_hooks_before_the_run(hooks, words):
    with pytest.raises(ParameterTypeError, match="hooks") as err:
        backup_app.validate_parameters({"overrides": {"hooks": hooks}})
    assert words in str(err.value)


@pytest.mark.parametrize(
    ("field", "value", "words"),
    [
        ("namespace", "Shop", "is not a DNS-1123 label"),
        ("repo", "http://bucket", "is not s3://bucket[/prefix] or file:///path"),
        ("parallelism", 0, "parallelism"),
        ("repo_secrets", "creds", "Extra inputs are not permitted"),
    ],
)
def test_backup_refuses_overrides_that_cannot_work_before_the_run(field, value, words):
    """The overrides are one typed object (``movers.policy.overrides.PolicyOverrides``), each field checked as the
    policy checks it."""
    with pytest.raises(ParameterTypeError, match=f"overrides.{field}") as err:
        backup_app.validate_parameters({"overrides": {field: value}})
    assert words in str(err.value)


@pytest.mark.parametrize(
    ("param", "value", "words"),
    [
        ("tolerations", [{"operator": "Maybe"}], "[0].operator: must be Exists or Equal"),
        ("node_selector", {"disk type": "ssd"}, "is not a valid label key"),
        ("affinity", {"podAffinity": {}}, "podAffinity: is not supported"),
    ],
)
def test_restore_refuses_bad_writer_placement_before_the_run(param, value, words):
    with pytest.raises(ParameterTypeError, match=param) as err:
        restore_app.validate_parameters({"request": {**RESTORE, param: value}})
    assert words in str(err.value)


def test_restore_placement_is_kubernetes_json_as_given():
    tolerations = [{"key": "dedicated", "operator": "Equal", "value": "backup", "effect": "NoSchedule"}]
    request = {**RESTORE, "tolerations": tolerations, "node_selector": {"pool": 7}}
    params = restore_app.validate_parameters({"request": request})
    assert params["request"].tolerations == tolerations and params["request"].node_selector == {"pool": "7"}


@pytest.mark.parametrize(
    ("field", "value", "words"),
    [
        ("namespace", "Shop", "is not a DNS-1123 label"),
        ("target_namespace", "shop_copy", "is not a DNS-1123 label"),
        ("pvcs", ["data", "Data!"], "is not a valid Kubernetes object name"),
        ("backup", "", "must be a non-empty string"),
        ("parallelism", 0, "greater than or equal to 1"),
        ("timeout", 0, "greater than 0"),
        ("overwirte", True, "Extra inputs are not permitted"),
    ],
)
def test_restore_refuses_a_request_that_cannot_work_before_the_run(field, value, words):
    """The deployment's form is one typed request: a name Kubernetes would refuse, a pace that cannot work or a
    misspelt field is refused by Prefect's parameter validation, naming the field, before the run starts."""
    with pytest.raises(ParameterTypeError, match=f"request.{field}") as err:
        restore_app.validate_parameters({"request": {**RESTORE, field: value}})
    assert words in str(err.value)


@pytest.mark.parametrize(
    ("field", "value", "words"),
    [
        ("grace", "soon", "must be a duration"),
        ("grace", "-1h", "must not be negative"),
        ("sample", 1.5, "less than or equal to 1"),
        ("keep_last", -1, "greater than or equal to 0"),
        ("key_secret", "cbt-mover-repo", "must be namespace/name of a Secret"),
        ("verify", "quick", "'sampled', 'full' or 'off'"),
    ],
)
def test_maintenance_refuses_a_request_that_cannot_work_before_the_run(field, value, words):
    """The maintenance deployment's form is one typed request (``movers.maintenance.request``)."""
    from flows.maintenance import maintain_repo

    with pytest.raises(ParameterTypeError, match=f"request.{field}") as err:
        maintain_repo.validate_parameters({"request": {"repo": "s3://b", field: value}})
    assert words in str(err.value)
