"""Quiesce hooks as data: policy entries, Velero-style annotations, Go durations, clear errors."""

from __future__ import annotations

import pytest

from movers.policy.hooks import Hook, HookSet, HookSpecError, hookset_from_annotations, hookset_from_policy


def test_policy_hooks_with_defaults_and_aliases():
    hs = hookset_from_policy(
        {
            "pre": [
                {"name": "freeze", "pod_selector": {"app": "db"}, "command": ["python", "-m", "app", "freeze"]},
                {
                    "name": "flush",
                    "podSelector": {"matchLabels": {"app": "db", "tier": "x"}},
                    "container": "db",
                    "command": ["powershell", "-Command", "Write-Host hi"],
                    "timeoutSeconds": 5,
                    "onError": "Continue",
                },
            ],
            "post": [
                {
                    "name": "thaw",
                    "pod_selector": {"app": "db"},
                    "command": ["cmd.exe", "/c", "echo thaw"],
                    "timeout": "1m30s",
                }
            ],
        }
    )
    freeze, flush = hs.pre
    assert freeze == Hook(name="freeze", pod_selector={"app": "db"}, command=["python", "-m", "app", "freeze"])
    assert freeze.container is None and freeze.timeout_s == 30 and freeze.on_error == "fail"
    assert flush.pod_selector == {"app": "db", "tier": "x"} and flush.label_selector == "app=db,tier=x"
    assert flush.container == "db" and flush.timeout_s == 5 and flush.on_error == "continue"
    assert hs.post[0].timeout_s == 90 and hs.post[0].command == ["cmd.exe", "/c", "echo thaw"]
    assert hookset_from_policy(None) == HookSet() and not HookSet()
    assert hookset_from_policy({"pre": None}) == HookSet()


@pytest.mark.parametrize(
    ("entry", "message"),
    [
        ({"pod_selector": {"a": "b"}, "command": ["x"]}, "pre hook #1: name: is required"),
        ({"name": "f", "command": ["x"]}, "pre hook 'f': pod_selector: is required"),
        ({"name": "f", "pod_selector": {"a": "b"}}, "pre hook 'f': command: is required"),
        (
            {"name": "f", "pod_selector": {"a": "b"}, "command": "fsfreeze -f /data"},
            "command: must be a list (an argv)",
        ),
        ({"name": "f", "pod_selector": {"a": "b"}, "command": []}, "hook 'f': command: must be a non-empty list"),
        ({"name": "f", "pod_selector": {"a": "b"}, "command": ["x", 1]}, "hook 'f': command: must be"),
        ({"name": "f", "pod_selector": {}, "command": ["x"]}, "hook 'f': pod_selector: must select pods"),
        ({"name": "f", "pod_selector": {"a": True}, "command": ["x"]}, "hook 'f': pod_selector.a: label value"),
        ({"name": "f", "pod_selector": {"a": "b"}, "command": ["x"], "on_error": "ignore"}, "hook 'f': on_error"),
        ({"name": "f", "pod_selector": {"a": "b"}, "command": ["x"], "timeout": "10 sec"}, "hook 'f': timeout"),
        ({"name": "f", "pod_selector": {"a": "b"}, "command": ["x"], "timeout": 0}, "hook 'f': timeout: must be"),
        ({"name": "f", "pod_selector": {"a": "b"}, "command": ["x"], "shell": True}, "hook 'f': shell: unknown field"),
        ({"name": "f", "pod_selector": {"a": "b"}, "command": ["x"], "container": ""}, "hook 'f': container"),
        ({"name": "f", "pod_selector": {"a": "b"}, "podSelector": {"a": "b"}, "command": ["x"]}, "same field as"),
        ("freeze", "pre hook #1: must be a mapping"),
    ],
)
def test_policy_errors_name_the_hook_and_field(entry, message):
    with pytest.raises(HookSpecError) as err:
        hookset_from_policy({"pre": [entry]})
    assert message in str(err.value)


def test_policy_structure_errors():
    with pytest.raises(HookSpecError, match="unknown field"):
        hookset_from_policy({"pre": [], "during": []})
    with pytest.raises(HookSpecError, match="post: must be a list"):
        hookset_from_policy({"post": {"name": "x"}})
    hook = {"name": "f", "pod_selector": {"a": "b"}, "command": ["x"]}
    with pytest.raises(HookSpecError, match="pre: duplicate hook name"):
        hookset_from_policy({"pre": [hook, hook]})
    with pytest.raises(HookSpecError, match="post hook #2"):
        hookset_from_policy({"post": [hook, {"name": 3}]})


def test_velero_annotations_json_array_and_plain_string():
    hs = hookset_from_annotations(
        "db-0",
        {
            "pre.hook.backup.velero.io/container": "db",
            "pre.hook.backup.velero.io/command": '["/sbin/fsfreeze", "--freeze", "/var/lib/data dir"]',
            "pre.hook.backup.velero.io/on-error": "Continue",
            "pre.hook.backup.velero.io/timeout": "1m30s",
            "post.hook.backup.velero.io/command": "/sbin/fsfreeze --unfreeze '/var/lib/data dir'",
            "unrelated/annotation": "x",
        },
    )
    (pre,), (post,) = hs.pre, hs.post
    assert pre.pod_name == "db-0" and pre.container == "db" and pre.on_error == "continue" and pre.timeout_s == 90
    assert pre.command == ["/sbin/fsfreeze", "--freeze", "/var/lib/data dir"]
    assert post.command == ["/sbin/fsfreeze", "--unfreeze", "/var/lib/data dir"]
    assert post.container is None and post.on_error == "fail" and post.timeout_s == 30 and post.pod_name == "db-0"
    assert pre.target == "pod db-0" and pre.name != post.name


def test_velero_legacy_pre_and_windows_argv_and_none():
    hs = hookset_from_annotations("win", {"hook.backup.velero.io/command": '["cmd.exe", "/c", "echo frozen"]'})
    assert hs.pre[0].command == ["cmd.exe", "/c", "echo frozen"] and hs.post == []
    assert hookset_from_annotations("p", None) == HookSet() == hookset_from_annotations("p", {"a": "b"})
    merged = hookset_from_annotations("a", {"post.hook.backup.velero.io/command": "thaw"}) + hs
    assert [h.pod_name for h in merged.pre] == ["win"] and [h.pod_name for h in merged.post] == ["a"]


@pytest.mark.parametrize(
    ("annotations", "message"),
    [
        ({"pre.hook.backup.velero.io/container": "db"}, "missing pre.hook.backup.velero.io/command"),
        ({"pre.hook.backup.velero.io/command": "[1, 2]"}, "must hold strings only"),
        ({"pre.hook.backup.velero.io/command": "[oops"}, "invalid JSON array"),
        ({"pre.hook.backup.velero.io/command": "echo 'unclosed"}, "cannot split"),
        ({"post.hook.backup.velero.io/command": "  "}, "post.hook.backup.velero.io/command is empty"),
        ({"pre.hook.backup.velero.io/command": "x", "pre.hook.backup.velero.io/on-error": "Retry"}, "Fail or Continue"),
        (
            {"pre.hook.backup.velero.io/command": "x", "pre.hook.backup.velero.io/timeout": "30"},
            "velero.io/timeout: '30' is not a duration",
        ),
        (
            {"pre.hook.backup.velero.io/command": "x", "pre.hook.backup.velero.io/timeout": "0s"},
            "timeout must be positive",
        ),
        ({"pre.hook.backup.velero.io/command": "x", "pre.hook.backup.velero.io/retries": "2"}, "unknown annotation"),
    ],
)
def test_velero_annotation_errors_name_the_pod(annotations, message):
    with pytest.raises(HookSpecError) as err:
        hookset_from_annotations("db-0", annotations)
    assert message in str(err.value) and "'db-0'" in str(err.value)
