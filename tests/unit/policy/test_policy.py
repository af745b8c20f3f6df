"""movers.policy.model: the example policies load, defaults fill in, and every bad field is named with its file."""

from __future__ import annotations

import copy
from pathlib import Path

import pytest
import yaml

from movers.errors import UsageError
from movers.policy.model import (
    BackupPolicy,
    PolicyError,
    Retention,
    Timeouts,
    load_policies,
    load_policy,
    parse_policy,
)

POLICIES = Path(__file__).resolve().parents[3] / "configs" / "policies"

MINIMAL = {
    "name": "app",
    "namespace": "ns",
    "pvc_selector": {"matchLabels": {"app": "x"}},
    "repository": {"url": "s3://bucket/prefix"},
}


def write(tmp_path: Path, data, name: str = "p.yaml") -> Path:
    path = tmp_path / name
    path.write_text(data if isinstance(data, str) else yaml.safe_dump(data))
    return path


def test_examples_load():
    policies = {p.name: p for p in load_policies(POLICIES)}
    assert set(policies) == {"demo", "shop-db"}
    db = policies["shop-db"]
    assert db.namespace == "shop" and db.source.endswith("postgres.yaml")
    assert db.pvc_selector["matchExpressions"][0] == {
        "key": "app.kubernetes.io/component",
        "operator": "In",
        "values": ["data", "wal"],
    }
    assert db.repository.credentials_secret == "cbt-mover-repo"
    assert (db.schedule.cron, db.schedule.timezone) == ("30 1 * * *", "Europe/Berlin")
    assert [h.name for h in db.hooks.pre] == ["checkpoint", "fsfreeze-data", "fsfreeze-wal"]
    assert all(isinstance(h.command, list) for h in db.hooks.pre + db.hooks.post)
    assert db.hooks.post[0].on_error == "continue"
    assert db.retention == Retention(keep_last=3, keep_daily=7, keep_weekly=4, keep_monthly=12)
    assert db.group_snapshot.class_name == "csi-group-snapclass" and db.group_snapshot.timeout == 300.0
    assert db.timeouts.mover == 7200.0 and db.snapshot_class == "csi-snapclass"
    assert db.mover.node_selector["kubernetes.io/os"] == "linux"
    assert db.mover.resources["limits"] == {"cpu": "2", "memory": "2Gi"}
    assert db.mover.tolerations == [
        {"key": "node-role.example.com/backup", "operator": "Exists", "effect": "NoSchedule"}
    ]
    assert db.mover.affinity["nodeAffinity"]["preferredDuringSchedulingIgnoredDuringExecution"][0]["weight"] == 50
    assert (db.group_snapshot.freeze_timeout, db.group_snapshot.on_timeout) == (20.0, "per-pvc")
    assert db.retained_snapshots == "remove"
    demo = policies["demo"]
    assert demo.hooks.pre[0].command[:3] == ["python", "-m", "demo.demo_app"]
    assert demo.mover.image == "cbt-mover"
    assert demo.group_snapshot.freeze_timeout < 10, "the demo app thaws itself after 10 s"


def test_defaults(tmp_path):
    policy = load_policy(write(tmp_path, MINIMAL))
    assert isinstance(policy, BackupPolicy)
    assert policy.schedule is None and policy.hooks.pre == [] and policy.hooks.post == []
    assert policy.use_pod_annotations is False and policy.parallelism == 2
    assert policy.retention == Retention() and policy.timeouts == Timeouts()
    assert policy.repository.credentials_secret is None
    assert policy.mover.service_account == "cbt-mover" and policy.mover.node_selector == {"kubernetes.io/os": "linux"}
    assert policy.mover.resources["requests"] and policy.mover.resources["limits"]
    assert (policy.cbt.enabled, policy.cbt.max_results) == ("auto", 4096)
    assert policy.group_snapshot.class_name is None and policy.snapshot_class is None
    data = policy.model_dump(by_alias=True)
    assert (
        data["group_snapshot"] == {"class": None, "timeout": 300.0, "freeze_timeout": 20.0, "on_timeout": "per-pvc"}
        and "source" not in data
    )
    assert (data["mover"]["tolerations"], data["mover"]["affinity"]) == ([], None)
    assert parse_policy(copy.deepcopy(MINIMAL)).model_dump(by_alias=True) == data


def test_values_normalised(tmp_path):
    data = {
        **MINIMAL,
        "schedule": {"cron": "@daily"},
        "cbt": {"enabled": False},
        "timeouts": {"snapshot": "1h30m", "mover": "45s", "hook": 2.5},
        "mover": {"resources": {"requests": {"cpu": 1}}, "node_selector": {"disk": "ssd"}},
        "pvc_selector": {"matchLabels": {"tier": 1}},
    }
    policy = load_policy(write(tmp_path, data))
    assert (policy.schedule.cron, policy.schedule.timezone) == ("@daily", "UTC")
    assert policy.cbt.enabled == "off"  # YAML `off` is false
    assert (policy.timeouts.snapshot, policy.timeouts.mover, policy.timeouts.hook) == (5400.0, 45.0, 2.5)
    assert policy.mover.resources == {"requests": {"cpu": "1"}, "limits": {}}
    assert policy.mover.node_selector == {"kubernetes.io/os": "linux", "disk": "ssd"}
    assert policy.pvc_selector == {"matchLabels": {"tier": "1"}}


def test_scheduling_and_freeze_settings(tmp_path):
    required = {
        "nodeSelectorTerms": [
            {
                "matchExpressions": [
                    {"key": "pool", "operator": "In", "values": ["backup", 7]},
                    {"key": "gpu", "operator": "DoesNotExist"},
                    {"key": "cores", "operator": "Gt", "values": ["3"]},
                ]
            },
            {"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["node-b"]}]},
        ]
    }
    data = {
        **MINIMAL,
        "mover": {
            "tolerations": [
                {"key": "dedicated", "operator": "Equal", "value": "backup", "effect": "NoSchedule"},
                {"key": "dedicated", "value": 1},  # operator empty: Equal; every effect
                {"operator": "Exists"},  # no key: every taint
                {
                    "key": "node.kubernetes.io/unreachable",
                    "operator": "Exists",
                    "effect": "NoExecute",
                    "tolerationSeconds": 30,
                },
            ],
            "affinity": {
                "nodeAffinity": {
                    "requiredDuringSchedulingIgnoredDuringExecution": required,
                    "preferredDuringSchedulingIgnoredDuringExecution": [
                        {
                            "weight": 100,
                            "preference": {
                                "matchExpressions": [
                                    {"key": "topology.kubernetes.io/zone", "operator": "In", "values": ["zone-a"]}
                                ]
                            },
                        }
                    ],
                }
            },
        },
        "group_snapshot": {"freeze_timeout": "45s", "on_timeout": "fail"},
        "retained_snapshots": "keep",
    }
    policy = load_policy(write(tmp_path, data))
    assert policy.retained_snapshots == "keep"
    assert policy.mover.tolerations == [
        {"key": "dedicated", "operator": "Equal", "value": "backup", "effect": "NoSchedule"},
        {"key": "dedicated", "value": "1"},
        {"operator": "Exists"},
        {"key": "node.kubernetes.io/unreachable", "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 30},
    ]
    node = policy.mover.affinity["nodeAffinity"]
    assert node["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"][0]["matchExpressions"][0] == {
        "key": "pool",
        "operator": "In",
        "values": ["backup", "7"],
    }
    assert (
        node["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"][1]
        == required["nodeSelectorTerms"][1]
    )
    assert node["preferredDuringSchedulingIgnoredDuringExecution"][0]["weight"] == 100
    assert (policy.group_snapshot.freeze_timeout, policy.group_snapshot.on_timeout) == (45.0, "fail")
    assert policy.model_dump()["mover"]["affinity"] == policy.mover.affinity


def test_cbt_off_spelled_as_string_in_yaml(tmp_path):
    text = yaml.safe_dump(MINIMAL) + "cbt:\n  enabled: 'off'\n"
    assert load_policy(write(tmp_path, text)).cbt.enabled == "off"


def _with(path: str, value):
    data = copy.deepcopy(MINIMAL)
    *parents, last = path.split(".")
    node = data
    for key in parents:
        node = node.setdefault(key, {})
    if value is _DELETE:
        node.pop(last)
    else:
        node[last] = value
    return data


_DELETE = object()
HOOK = {"name": "h", "pod_selector": {"matchLabels": {"app": "x"}}, "container": "c", "command": ["true"]}

# fmt: off
BAD = [
    # (field to set, value, field named in the error, words in the problem)
    ("name", _DELETE, "name", "is required"),
    ("name", "Bad_Name", "name", "DNS-1123"),
    ("name", 5, "name", "non-empty string"),
    ("namespace", _DELETE, "namespace", "is required"),
    ("namespace", "x" * 64, "namespace", "DNS-1123"),
    ("bogus", 1, "bogus", "unknown field"),
    ("pvc_selector", _DELETE, "pvc_selector", "is required"),
    ("pvc_selector", ["app"], "pvc_selector", "must be a mapping"),
    ("pvc_selector", {"matchLabels": {}}, "pvc_selector", "selects every PVC"),
    ("pvc_selector", {"matchlabels": {"a": "b"}}, "pvc_selector.matchlabels", "unknown field"),
    ("pvc_selector.matchLabels", {"bad key!": "x"}, "pvc_selector.matchLabels.bad key!", "label key"),
    ("pvc_selector.matchLabels", {"a": "bad value!"}, "pvc_selector.matchLabels.a", "label value"),
    ("pvc_selector.matchLabels", {"a": True}, "pvc_selector.matchLabels.a", "must be a string"),
    ("pvc_selector.matchExpressions", {"key": "a"}, "pvc_selector.matchExpressions", "must be a list"),
    ("pvc_selector.matchExpressions", [{"key": "a", "operator": "Has"}], "pvc_selector.matchExpressions[0].operator",
     "must be one of"),
    ("pvc_selector.matchExpressions", [{"operator": "Exists"}], "pvc_selector.matchExpressions[0].key", "required"),
    ("pvc_selector.matchExpressions", [{"key": "a", "operator": "In"}], "pvc_selector.matchExpressions[0].values",
     "non-empty list"),
    ("pvc_selector.matchExpressions", [{"key": "a", "operator": "Exists", "values": ["x"]}],
     "pvc_selector.matchExpressions[0].values", "must be empty"),
    ("repository", _DELETE, "repository", "is required"),
    ("repository", "s3://b", "repository", "must be a mapping"),
    ("repository.url", _DELETE, "repository.url", "is required"),
    ("repository.url", "http://x/y", "repository.url", "s3://bucket"),
    ("repository.url", "s3:///prefix", "repository.url", "no bucket"),
    ("repository.url", "file://relative", "repository.url", "absolute path"),
    ("repository.credentials_secret", "Not A Name", "repository.credentials_secret", "object name"),
    ("repository.region", "x", "repository.region", "unknown field"),
    ("schedule", "daily", "schedule", "must be a mapping"),
    ("schedule", {"timezone": "UTC"}, "schedule.cron", "is required"),
    ("schedule", {"cron": "0 2 * *"}, "schedule.cron", "5 fields"),
    ("schedule", {"cron": "61 2 * * *"}, "schedule.cron", "not a valid cron"),
    ("schedule", {"cron": "H 2 * * *"}, "schedule.cron", "hashed/random"),
    ("schedule", {"cron": "0 2 * * *", "timezone": "Mars/Olympus"}, "schedule.timezone", "IANA"),
    ("schedule", {"cron": "0 2 * * *", "tz": "UTC"}, "schedule.tz", "unknown field"),
    ("hooks", [HOOK], "hooks", "must be a mapping"),
    ("hooks", {"during": []}, "hooks.during", "unknown field"),
    ("hooks", {"pre": HOOK}, "hooks.pre", "must be a list"),
    ("hooks", {"pre": ["echo hi"]}, "hooks.pre[0]", "must be a mapping"),
    ("hooks", {"pre": [{**HOOK, "command": "fsfreeze -f /data"}]}, "hooks.pre[0].command", "argv"),
    ("hooks", {"post": [HOOK, {**HOOK, "command": []}]}, "hooks.post[1].command", "argv"),
    ("hooks", {"pre": [{**HOOK, "on_error": "ignore"}]}, "hooks.pre[0].on_error", "fail or continue"),
    ("hooks", {"pre": [{**HOOK, "timeout": "soon"}]}, "hooks.pre[0].timeout", "duration"),
    ("hooks", {"pre": [{**HOOK, "container": ""}]}, "hooks.pre[0].container", "non-empty string"),
    ("hooks", {"pre": [{**HOOK, "name": 3}]}, "hooks.pre[0].name", "non-empty string"),
    ("hooks", {"pre": [{**HOOK, "pod_selector": {}}]}, "hooks.pre[0].pod_selector", "must select pods"),
    ("use_pod_annotations", "yes please", "use_pod_annotations", "true or false"),
    ("retention.keep_last", -1, "retention.keep_last", "at least 0"),
    ("retention.keep_daily", 1.5, "retention.keep_daily", "integer"),
    ("retention.keep_yearly", 1, "retention.keep_yearly", "unknown field"),
    ("retention", {"keep_last": 0, "keep_daily": 0, "keep_weekly": 0, "keep_monthly": 0}, "retention",
     "keeps no backup"),
    ("parallelism", 0, "parallelism", "at least 1"),
    ("parallelism", True, "parallelism", "integer"),
    ("mover", "cbt-mover", "mover", "must be a mapping"),
    ("mover.image", "", "mover.image", "non-empty string"),
    ("mover.service_account", "Mover!", "mover.service_account", "object name"),
    ("mover.resources", {"requests": {"cpu": "lots"}}, "mover.resources.requests.cpu", "quantity"),
    ("mover.resources", {"requests": {"memory": [1]}}, "mover.resources.requests.memory", "quantity"),
    ("mover.resources", {"request": {}}, "mover.resources.request", "unknown field"),
    ("mover.resources", {"requests": {"memory": "2Gi"}, "limits": {"memory": "1Gi"}},
     "mover.resources.requests.memory", "above the limit"),
    ("mover.node_selector", {"kubernetes.io/os": "windows"}, "mover.node_selector", "Windows"),
    ("mover.node_selector", ["linux"], "mover.node_selector", "must be a mapping"),
    ("mover.tolerate", [], "mover.tolerate", "unknown field"),
    ("mover.tolerations", {"key": "a"}, "mover.tolerations", "must be a list"),
    ("mover.tolerations", ["a"], "mover.tolerations[0]", "must be a mapping"),
    ("mover.tolerations", [{"key": "a", "operator": "In"}], "mover.tolerations[0].operator", "Exists or Equal"),
    ("mover.tolerations", [{"key": "a", "operator": "Exists", "value": "b"}], "mover.tolerations[0].value",
     "must be empty when operator is Exists"),
    ("mover.tolerations", [{"value": "b"}], "mover.tolerations[0].operator", "must be Exists when key is empty"),
    ("mover.tolerations", [{"operator": "Equal", "effect": "NoSchedule"}], "mover.tolerations[0].operator",
     "must be Exists when key is empty"),
    ("mover.tolerations", [{"key": "a", "effect": "NoAdmit"}], "mover.tolerations[0].effect", "NoSchedule"),
    ("mover.tolerations", [{"key": "a", "operator": "Exists", "effect": "NoSchedule", "tolerationSeconds": 5}],
     "mover.tolerations[0].effect", "must be NoExecute when tolerationSeconds is set"),
    ("mover.tolerations", [{"key": "a", "operator": "Exists", "tolerationSeconds": 5}], "mover.tolerations[0].effect",
     "must be NoExecute"),
    ("mover.tolerations", [{"key": "a", "effect": "NoExecute", "tolerationSeconds": "5m"}],
     "mover.tolerations[0].tolerationSeconds", "integer"),
    ("mover.tolerations", [{"key": "bad key!", "operator": "Exists"}], "mover.tolerations[0].key", "label key"),
    ("mover.tolerations", [{"key": "a", "value": "bad value!"}], "mover.tolerations[0].value", "label value"),
    ("mover.tolerations", [{"key": "a", "seconds": 1}], "mover.tolerations[0].seconds", "unknown field"),
    ("mover.affinity", [], "mover.affinity", "must be a mapping"),
    ("mover.affinity", {"podAntiAffinity": {}}, "mover.affinity.podAntiAffinity", "nodeAffinity only"),
    ("mover.affinity", {"nodeaffinity": {}}, "mover.affinity.nodeaffinity", "unknown field"),
    ("mover.affinity", {"nodeAffinity": {}}, "mover.affinity.nodeAffinity", "give required"),
    ("mover.affinity", {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": []}}},
     "mover.affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution.nodeSelectorTerms",
     "at least one node selector term"),
    ("mover.affinity", {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
        {"matchExpressions": [{"key": "a", "operator": "In"}]}]}}},
     "mover.affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution.nodeSelectorTerms[0]"
     ".matchExpressions[0].values", "must be specified when operator is In"),
    ("mover.affinity", {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
        {"matchExpressions": [{"key": "a", "operator": "Exists", "values": ["x"]}]}]}}},
     "mover.affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution.nodeSelectorTerms[0]"
     ".matchExpressions[0].values", "may not be specified"),
    ("mover.affinity", {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
        {"matchExpressions": [{"key": "a", "operator": "Lt", "values": ["1", "2"]}]}]}}},
     "mover.affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution.nodeSelectorTerms[0]"
     ".matchExpressions[0].values", "single value"),
    ("mover.affinity", {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
        {"matchExpressions": [{"key": "a", "operator": "Near", "values": ["x"]}]}]}}},
     "mover.affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution.nodeSelectorTerms[0]"
     ".matchExpressions[0].operator", "must be one of"),
    ("mover.affinity", {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
        {"matchExpressions": [{"key": "a", "operator": "In", "values": ["bad value!"]}]}]}}},
     "mover.affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution.nodeSelectorTerms[0]"
     ".matchExpressions[0].values[0]", "label value"),
    ("mover.affinity", {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
        {"matchFields": [{"key": "metadata.labels", "operator": "In", "values": ["x"]}]}]}}},
     "mover.affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution.nodeSelectorTerms[0]"
     ".matchFields[0].key", "field selector key"),
    ("mover.affinity", {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
        {"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["a", "b"]}]}]}}},
     "mover.affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution.nodeSelectorTerms[0]"
     ".matchFields[0].values", "only one value"),
    ("mover.affinity", {"nodeAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": [
        {"weight": 0, "preference": {}}]}},
     "mover.affinity.nodeAffinity.preferredDuringSchedulingIgnoredDuringExecution[0].weight", "range 1-100"),
    ("mover.affinity", {"nodeAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": [{"weight": 1}]}},
     "mover.affinity.nodeAffinity.preferredDuringSchedulingIgnoredDuringExecution[0].preference", "is required"),
    ("cbt.enabled", "on", "cbt.enabled", "auto or off"),
    ("cbt.max_results", -5, "cbt.max_results", "at least 0"),
    ("cbt.mode", "auto", "cbt.mode", "unknown field"),
    ("group_snapshot.class", "", "group_snapshot.class", "non-empty string"),
    ("group_snapshot.timeout", 0, "group_snapshot.timeout", "positive"),
    ("group_snapshot.timeout", "5 minutes", "group_snapshot.timeout", "duration"),
    ("group_snapshot.className", "x", "group_snapshot.className", "unknown field"),
    ("group_snapshot.freeze_timeout", "soon", "group_snapshot.freeze_timeout", "duration"),
    ("group_snapshot.freeze_timeout", 0, "group_snapshot.freeze_timeout", "positive"),
    ("group_snapshot.on_timeout", "scan", "group_snapshot.on_timeout", "per-pvc or fail"),
    ("snapshot_class", "Bad Class", "snapshot_class", "object name"),
    ("retained_snapshots", "delete", "retained_snapshots", "remove or keep"),
    ("retained_snapshots", True, "retained_snapshots", "remove or keep"),
    ("timeouts.mover", -1, "timeouts.mover", "positive"),
    ("timeouts.mover", True, "timeouts.mover", "duration"),
    ("timeouts.backup", 10, "timeouts.backup", "unknown field"),
]
# fmt: on


@pytest.mark.parametrize(("path", "value", "field", "words"), BAD, ids=[f"{b[0]}-{i}" for i, b in enumerate(BAD)])
def test_validation_errors_name_file_and_field(tmp_path, path, value, field, words):
    file = write(tmp_path, _with(path, value))
    with pytest.raises(PolicyError) as info:
        load_policy(file)
    err = info.value
    assert (err.file, err.field) == (str(file), field)
    assert str(err).startswith(f"{file}: {field}: ") and words in str(err), str(err)
    assert isinstance(err, UsageError) and err.exit_code == 2


def test_file_level_errors(tmp_path):
    with pytest.raises(PolicyError, match=r"missing\.yaml: cannot read"):
        load_policy(tmp_path / "missing.yaml")
    with pytest.raises(PolicyError, match=r"broken\.yaml: not valid YAML at line 2"):
        load_policy(write(tmp_path, "name: a\n  bad: [\n", "broken.yaml"))
    with pytest.raises(PolicyError, match=r"list\.yaml: the policy must be a mapping of fields, not a list"):
        load_policy(write(tmp_path, "- a\n", "list.yaml"))
    with pytest.raises(PolicyError, match=r"empty\.yaml: the policy must be a mapping of fields, not nothing"):
        load_policy(write(tmp_path, "", "empty.yaml"))
    err = pytest.raises(PolicyError, parse_policy, {**MINIMAL, "name": None}).value
    assert str(err) == "<policy>: name: is required"


def test_load_policies_directory(tmp_path):
    write(tmp_path, MINIMAL, "b.yaml")
    write(tmp_path, {**MINIMAL, "name": "other"}, "a.yml")
    (tmp_path / "notes.txt").write_text("not a policy")
    assert [p.name for p in load_policies(tmp_path)] == ["other", "app"]
    write(tmp_path, MINIMAL, "c.yaml")
    with pytest.raises(PolicyError, match=r"c\.yaml: name: 'app' is also the name of the policy in .*b\.yaml"):
        load_policies(tmp_path)
    with pytest.raises(PolicyError, match="not a directory"):
        load_policies(tmp_path / "nope")
    with pytest.raises(PolicyError, match=r"notes\.txt: not a directory"):
        load_policies(tmp_path / "notes.txt")


@pytest.mark.parametrize(
    "hook, selector",
    [
        ({"pod_selector": {"app": "db"}}, "app=db"),  # a flat selector: labels, as the hook parser reads them
        (
            {"pod_selector": {"matchExpressions": [{"key": "tier", "operator": "In", "values": ["db", "cache"]}]}},
            "tier in (db,cache)",
        ),
        (
            {
                "pod_selector": {
                    "matchLabels": {"app": "db"},
                    "matchExpressions": [{"key": "canary", "operator": "DoesNotExist"}],
                },
                "timeout": "250ms",
            },
            "app=db,!canary",
        ),
    ],
)
def test_a_hook_the_policy_accepts_is_the_hook_the_flow_runs(hook, selector):
    """The policy's hooks are the model the flow runs hooks from: what loads, runs, as written."""
    policy = parse_policy({**MINIMAL, "hooks": {"pre": [{"name": "h", "command": ["true"], **hook}]}})
    (parsed,) = policy.hooks.hookset(policy.timeouts.hook).pre
    assert parsed.label_selector == selector and parsed.timeout_s == (0.25 if "timeout" in hook else 60.0)


@pytest.mark.parametrize(
    "hook, field, fragment",
    [
        ({"pod_selector": {"app": "db"}, "command": ["true"]}, "hooks.pre[0].name", "is required"),
        (
            {"name": "h", "pod_selector": {"app": "db"}, "command": ["true"], "retries": 2},
            "hooks.pre[0].retries",
            "unknown",
        ),
        (
            {"name": "h", "podSelector": {"app": "db"}, "pod_selector": {}, "command": ["true"]},
            "hooks.pre[0].podSelector",
            "same",
        ),
    ],
)
def test_a_hook_the_flow_would_refuse_does_not_load(hook, field, fragment):
    """The policy's hooks are movers.hooks' own model: what the flow would refuse, the policy refuses, by field."""
    with pytest.raises(PolicyError, match=fragment) as err:
        parse_policy({**MINIMAL, "hooks": {"pre": [hook]}})
    assert err.value.field == field


def test_flow_parameters_override_the_policy_file():
    """``movers.policy.overrides``: a flow's parameters over the policy file, None leaving the file's value."""
    from movers.policy.overrides import PolicyOverrides, policy_from_parameters, resolve_policy

    path = str(POLICIES / "demo.yaml")
    base = load_policy(path)
    same = resolve_policy(path, PolicyOverrides(namespace=None, repo=None))
    assert same == base == resolve_policy(path), "None overrides nothing"
    given = PolicyOverrides(repo="file:///elsewhere", repo_secret="s2", image="img:2", selector={"app": "y"})
    moved = resolve_policy(path, given)
    assert (moved.repository.url, moved.repository.credentials_secret) == ("file:///elsewhere", "s2")
    assert moved.mover.image == "img:2" and moved.pvc_selector == {"matchLabels": {"app": "y"}}
    expressions = {"matchExpressions": [{"key": "tier", "operator": "In", "values": ["db"]}]}
    assert resolve_policy(path, PolicyOverrides(selector=expressions)).pvc_selector == expressions, (
        "a LabelSelector stays as given"
    )
    direct = policy_from_parameters({"overrides": {"namespace": "ns", "selector": {"app": "x"}, "repo": "s3://b/p"}})
    assert (direct.name, direct.namespace, direct.repository.url) == ("ns", "ns", "s3://b/p"), (
        "named after its namespace"
    )
