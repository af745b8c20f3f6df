"""prefect.yaml, the work pools and the image: every deployment's entrypoint loads and its parameters
fit the flow; each policy has a backup deployment on the policy's schedule; maintenance is weekly;
the Dockerfile holds what the deployments need. Then for real, against a Prefect server started
here (own PREFECT_HOME, loopback): ``python -m deploy.pools`` creates the pools (and is idempotent),
``prefect deploy --all`` registers the deployments with their schedules and parameters, and a
process worker runs the maintenance deployment once against a moto S3 repository."""

from __future__ import annotations

import ast
import contextlib
import inspect
import json
import os
import re
import signal
import subprocess
import sys
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
import yaml

from localcluster.s3 import free_port, wait_http

ROOT = Path(__file__).resolve().parents[2]
PREFECT = str(Path(sys.executable).with_name("prefect"))
POLICIES = ROOT / "configs" / "policies"
FLOW_NAMES = {
    "backup-demo": "backup-app",
    "backup-postgres": "backup-app",
    "restore": "restore-app",
    "files": "restore-files",
    "maintenance": "maintain-repo",
}
# values for required parameters a deployment leaves to the run (restore is on demand), by flow
EXAMPLE_VALUES = {
    "backup-app": {"policy_path": "configs/policies/demo.yaml"},
    "restore-app": {"request": {"repo": "s3://bucket/prefix", "namespace": "shop", "pvcs": ["data"]}},
    "maintain-repo": {"request": {"repo": "s3://bucket/prefix", "policy_paths": []}},
    "restore-files": {
        "request": {
            "repo": "s3://bucket/prefix",
            "namespace": "shop",
            "volumes": [{"pvc": "data", "paths": ["/etc/app.conf"]}],
            "target": {"claim": "recovered", "new": {"size": "1Gi"}},
        }
    },
}


def project() -> dict:
    return yaml.safe_load((ROOT / "prefect.yaml").read_text())


def deployments() -> dict[str, dict]:
    return {d["name"]: d for d in project()["deployments"]}


def entrypoint_file(deployment: dict) -> Path:
    return ROOT / deployment["entrypoint"].split(":", 1)[0]


def missing_entrypoints() -> list[str]:
    return sorted({d["entrypoint"] for d in deployments().values() if not entrypoint_file(d).exists()})


def load_flow(deployment: dict):
    """The deployment's flow; skips while its file is still being written by another engineer."""
    from prefect.flows import load_flow_from_entrypoint

    path = entrypoint_file(deployment)
    if not path.exists():
        pytest.skip(f"{deployment['entrypoint']}: {path.relative_to(ROOT)} is not in the tree yet")
    return load_flow_from_entrypoint(f"{path}:{deployment['entrypoint'].split(':', 1)[1]}")


# ---------------------------------------------------------------- prefect.yaml, statically


def test_project_file_names_every_deployment_on_one_target():
    config = project()
    assert config["prefect-version"].split(".")[:2] == __import__("prefect").__version__.split(".")[:2]
    found = deployments()
    assert set(found) == set(FLOW_NAMES)
    targets = config["definitions"]["targets"]
    # every deployment has the pool and the pull step of the same target: they must match each other
    chosen = {json.dumps({"work_pool": d["work_pool"], "pull": d["pull"]}, sort_keys=True) for d in found.values()}
    assert len(chosen) == 1, chosen
    assert json.loads(chosen.pop()) in targets.values()
    for deployment in found.values():
        assert deployment["enforce_parameter_schema"] is True, deployment["name"]
        assert "cbt-mover" in deployment["tags"], deployment["name"]
        assert deployment.get("description"), deployment["name"]


def test_targets_pair_each_pool_with_its_pull_step():
    from deploy.pools import K8S_POOL, LOCAL_POOL

    config = project()
    targets = config["definitions"]["targets"]
    assert targets["local"]["work_pool"]["name"] == LOCAL_POOL
    assert targets["k8s"]["work_pool"]["name"] == K8S_POOL
    (local_pull,) = targets["local"]["pull"]
    (k8s_pull,) = targets["k8s"]["pull"]
    step = "prefect.deployments.steps.set_working_directory"
    # local: the checkout `prefect deploy` ran in, from the build step with id "project"
    assert local_pull == {step: {"directory": "{{ project.stdout }}"}}
    (build,) = config["build"]
    assert build["prefect.deployments.steps.run_shell_script"]["id"] == "project"
    assert build["prefect.deployments.steps.run_shell_script"]["script"] == "pwd"
    # k8s: the image's working directory, where the Dockerfile puts the code
    assert k8s_pull[step]["directory"] == dockerfile_instructions()["WORKDIR"][-1]


def parameter_sets(deployment: dict) -> list[dict]:
    """The parameters a run of the deployment starts with: the deployment's, and each schedule's on top."""
    params = deployment.get("parameters") or {}
    return [params] + [{**params, **s["parameters"]} for s in deployment.get("schedules") or [] if s.get("parameters")]


def named_paths(params: dict | list | str) -> set[str]:
    """The project files (``configs/...``) that parameter values name, nested ones (a request's) too."""
    if isinstance(params, dict):
        return set().union(*(named_paths(v) for v in params.values()))
    if isinstance(params, list):
        return set().union(*(named_paths(v) for v in params))
    return {params} if isinstance(params, str) and params.startswith("configs/") else set()


@pytest.mark.parametrize("name", sorted(FLOW_NAMES))
def test_entrypoint_loads_and_parameters_fit_the_flow(name):
    from prefect.utilities.callables import parameter_schema

    deployment = deployments()[name]
    flow = load_flow(deployment)
    assert flow.name == FLOW_NAMES[name]
    accepted = set(inspect.signature(flow.fn).parameters)
    required = set(parameter_schema(flow).required or [])
    for params in parameter_sets(deployment):
        assert set(params) <= accepted, f"{name}: {sorted(set(params) - accepted)} are not parameters of {flow.name}"
        run_params = {**{key: EXAMPLE_VALUES[flow.name][key] for key in required - set(params)}, **params}
        flow.validate_parameters(run_params)  # raises ParameterTypeError / SignatureMismatchError
        # the same check rejects a wrong type, so the line above can fail
        key = next(iter(params), None) or next(iter(required), None)
        if key is not None:
            with pytest.raises(Exception, match=key):
                flow.validate_parameters({**run_params, key: {"not": "valid"}})
        for path in named_paths(params):
            assert (ROOT / path).is_file(), path
    if len(parameter_sets(deployment)) > 1:  # scheduled runs get everything they need from their schedule
        assert all(required <= set(params) for params in parameter_sets(deployment)[1:]), name


def test_each_policy_has_a_backup_deployment_on_its_schedule():
    from movers.policy.model import load_policies

    backups = [d for d in deployments().values() if d["entrypoint"] == "flows/backup.py:backup_app"]
    by_policy = {d["parameters"]["policy_path"]: d for d in backups}
    assert len(by_policy) == len(backups), "two backup deployments for one policy"
    policies = load_policies(POLICIES)
    assert policies
    for policy in policies:
        path = Path(policy.source).resolve().relative_to(ROOT).as_posix()
        assert path in by_policy, f"no backup deployment for {path}"
        deployment = by_policy.pop(path)
        assert deployment["name"] == f"backup-{Path(path).stem}"
        want = [{"cron": policy.schedule.cron, "timezone": policy.schedule.timezone}] if policy.schedule else []
        assert deployment["schedules"] == want, path
        assert deployment["concurrency_limit"] == {"limit": 1, "collision_strategy": "CANCEL_NEW"}
    assert not by_policy, f"backup deployments of no policy: {sorted(by_policy)}"


def test_maintenance_is_weekly_for_every_repository_and_restore_on_demand():
    from cronsim import CronSim

    from movers.policy.model import load_policies

    found = deployments()
    maintenance = found["maintenance"]
    by_repo: dict[str, list[str]] = {}
    for policy in load_policies(POLICIES):
        by_repo.setdefault(policy.repository.url, []).append(Path(policy.source).resolve().relative_to(ROOT).as_posix())
    schedules = maintenance["schedules"]
    assert len({s["slug"] for s in schedules}) == len(schedules)
    # one schedule per repository, with the policies whose retention applies to it
    asked = [s["parameters"]["request"] for s in schedules]
    assert {a["repo"]: sorted(a["policy_paths"]) for a in asked} == {
        repo: sorted(paths) for repo, paths in by_repo.items()
    }
    assert len(schedules) == len(by_repo)
    for schedule in schedules:
        it = CronSim(schedule["cron"], datetime(2026, 1, 1, tzinfo=UTC))
        runs = [next(it) for _ in range(6)]
        assert {b - a for a, b in zip(runs, runs[1:], strict=False)} == {timedelta(days=7)}, runs
        assert schedule["timezone"] == "UTC"
    assert maintenance["concurrency_limit"] == {"limit": 1, "collision_strategy": "ENQUEUE"}
    assert found["restore"]["schedules"] == []
    assert "concurrency_limit" not in found["restore"]
    assert found["files"]["schedules"] == []
    assert "concurrency_limit" not in found["files"]


# ---------------------------------------------------------------- the image, statically


def dockerfile_instructions() -> dict[str, list[str]]:
    """Instruction -> arguments in order, continuation lines joined, comments dropped."""
    lines, current = [], ""
    for raw in (ROOT / "Dockerfile").read_text().splitlines():
        if raw.lstrip().startswith("#") and not current:
            continue
        current += raw.rstrip().removesuffix("\\") + " "
        if not raw.rstrip().endswith("\\"):
            if current.strip():
                lines.append(current.strip())
            current = ""
    out: dict[str, list[str]] = {}
    for line in lines:
        word, _, rest = line.partition(" ")
        out.setdefault(word.upper(), []).append(re.sub(r"\s+", " ", rest.strip()))
    return out


def test_dockerfile_builds_what_the_deployments_need():
    inst = dockerfile_instructions()
    (base,) = inst["FROM"]
    image, _, tag = base.partition(":")
    assert image == "python" and tag and tag != "latest" and not tag.startswith("3-"), base
    requires = re.search(r'requires-python = ">=(\d+\.\d+)"', (ROOT / "pyproject.toml").read_text()).group(1)
    assert tag.startswith(requires + "-"), f"base image {base} is not Python {requires}"
    assert json.loads(inst["ENTRYPOINT"][-1]) == ["cbt-mover"]
    user = inst["USER"][-1]
    assert user.isdigit() and int(user) != 0, "run as a numeric non-root user (runAsNonRoot can check it)"
    assert inst["WORKDIR"][-1] == "/opt/app"
    copied = {src.rstrip("/") for line in inst["COPY"] for src in line.split()[:-1] if not src.startswith("--")}
    # every deployment's entrypoint file, the files its parameters name, prefect.yaml itself
    needed = {"prefect.yaml"}
    for deployment in deployments().values():
        needed.add(deployment["entrypoint"].split("/", 1)[0])
        needed |= {path.split("/", 1)[0] for params in parameter_sets(deployment) for path in named_paths(params)}
    # and every first-party package that the flows import
    first_party = {p.name for p in ROOT.iterdir() if (p / "__init__.py").exists()}
    for path in [*(ROOT / "flows").glob("*.py"), *(ROOT / "tasks").glob("*.py")]:
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
                names = [node.module]
            else:
                continue
            needed |= {n.split(".")[0] for n in names} & first_party
    assert "localcluster" not in needed, "the flows must not import the test double"
    assert needed <= copied, f"the image lacks {sorted(needed - copied)}"
    # the job template's user is the image's, and the flow-run Jobs override the entrypoint
    template = json.loads((ROOT / "configs" / "k8s-job-template.json").read_text())
    pod = template["job_configuration"]["job_manifest"]["spec"]["template"]["spec"]
    assert str(pod["securityContext"]["runAsUser"]) == user and pod["securityContext"]["runAsNonRoot"] is True
    (container,) = pod["containers"]
    assert container["securityContext"]["readOnlyRootFilesystem"] is True
    home = re.search(r"HOME=(\S+)", " ".join(inst["ENV"])).group(1)
    assert {m["mountPath"] for m in container["volumeMounts"]} == {home, "/tmp"}  # writable: Prefect's home, temp


def test_dockerignore_keeps_the_context_small_and_secret_free():
    patterns = {
        ln.strip().rstrip("/")
        for ln in (ROOT / ".dockerignore").read_text().splitlines()
        if ln.strip() and not ln.startswith("#")
    }
    assert {".venv", ".git", ".prefect", "tests", "localcluster", "movers/testing", "*.pem", "*.key"} <= patterns
    copied = {src.rstrip("/") for line in dockerfile_instructions()["COPY"] for src in line.split()[:-1]}
    assert not copied & patterns, copied & patterns
    assert ".prefect/" in (ROOT / ".gitignore").read_text().splitlines()


def test_make_ui_serves_on_loopback_with_its_own_home(monkeypatch):
    from deploy.prefect_server import server_env

    out = subprocess.run(
        ["make", "-n", "ui", "pools", "PREFECT_UI_PORT=4399"], cwd=ROOT, capture_output=True, text=True, check=True
    ).stdout
    (server,) = [ln for ln in out.splitlines() if "deploy.prefect_server" in ln]
    assert server.endswith("-m deploy.prefect_server --home .prefect --port 4399"), server
    # the server's environment (it binds 127.0.0.1 itself): its own home, no analytics, and never a
    # PREFECT_API_URL of the caller's shell
    monkeypatch.setenv("PREFECT_API_URL", "http://elsewhere:4200/api")
    env = server_env(ROOT / ".prefect", 4399)
    assert env["PREFECT_HOME"] == str(ROOT / ".prefect") and env["PREFECT_SERVER_ANALYTICS_ENABLED"] == "false"
    assert "PREFECT_API_URL" not in env and env["PREFECT_SERVER_UI_API_URL"] == "http://127.0.0.1:4399/api"
    assert "PREFECT_API_URL=http://127.0.0.1:4399/api make demo" in out
    assert "http://127.0.0.1:4399/api} .venv/bin/python -m deploy.pools" in out


# ---------------------------------------------------------------- for real: server, pools, deploy, worker


def _clean_env(**extra: str) -> dict[str, str]:
    """This process's environment without any Prefect or AWS setting, plus ``extra``."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PREFECT_", "AWS_"))}
    return {**env, "PYTHONUNBUFFERED": "1", "PREFECT_SERVER_ANALYTICS_ENABLED": "false", **extra}


def _stop_group(proc: subprocess.Popen) -> None:
    """End ``proc`` and the processes it started (its own session)."""
    if proc.poll() is None:
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()


@pytest.fixture(scope="module", autouse=True)
def _prefect_server(request, tmp_path_factory):
    """Start a Prefect server on a free loopback port with its own PREFECT_HOME (no UI, no background
    services: nothing is scheduled behind the tests' backs) as soon as the module starts, when any
    selected test needs it: it boots while the static tests run. Stopped when the module ends."""
    if not any("prefect_api" in item.fixturenames for item in request.session.items if item.module is request.module):
        yield None
        return
    home = tmp_path_factory.mktemp("prefect-home")
    port = free_port()
    with open(home / "server.log", "wb") as log:
        proc = subprocess.Popen(
            [PREFECT, "server", "start", "--host", "127.0.0.1", "--port", str(port), "--no-services", "--no-ui"],
            env=_clean_env(PREFECT_HOME=str(home)),
            stdout=log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
        )
        try:
            yield {"proc": proc, "home": home, "url": f"http://127.0.0.1:{port}/api"}
        finally:
            _stop_group(proc)


@pytest.fixture(scope="module")
def prefect_api(_prefect_server):
    """The running server: ``{"url", "env"}`` (``env``: for Prefect subprocesses that should use it)."""
    url, home = _prefect_server["url"], _prefect_server["home"]
    if not wait_http(f"{url}/health", 120, _prefect_server["proc"]):
        raise RuntimeError(f"prefect server did not start: {(home / 'server.log').read_text()[-2000:]}")
    return {"url": url, "env": _clean_env(PREFECT_HOME=str(home), PREFECT_API_URL=url)}


@contextlib.contextmanager
def _client(api):
    """A sync Prefect client of the test server."""
    from prefect.client.orchestration import get_client
    from prefect.settings import PREFECT_API_URL, temporary_settings

    with temporary_settings({PREFECT_API_URL: api["url"]}), get_client(sync_client=True) as client:
        yield client


@pytest.fixture(scope="module")
def deployed(prefect_api):
    """The pools (deploy.pools, run twice) and ``prefect deploy`` of prefect.yaml, from the project."""
    from prefect.settings import PREFECT_API_URL, temporary_settings

    from deploy import pools

    with temporary_settings({PREFECT_API_URL: prefect_api["url"]}):
        first = pools.ensure_pools()
        again = pools.ensure_pools()
        image = pools.ensure_pools(image="registry.example.com/cbt-mover:9.9.9", only="k8s")
    before = (ROOT / "prefect.yaml").read_bytes()
    missing = missing_entrypoints()
    names = (
        ["--all"]
        if not missing
        else [
            arg
            for d in deployments().values()
            if entrypoint_file(d).exists()
            for arg in ("--name", f"{FLOW_NAMES[d['name']]}/{d['name']}")
        ]
    )
    out = subprocess.run(
        [PREFECT, "--no-prompt", "deploy", *names],
        cwd=ROOT,
        env=prefect_api["env"],
        capture_output=True,
        text=True,
        timeout=240,
        stdin=subprocess.DEVNULL,
    )
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    assert (ROOT / "prefect.yaml").read_bytes() == before, "prefect deploy rewrote prefect.yaml"
    return {"pools": (first, again, image), "missing": missing}


@pytest.mark.slow
def test_pools_are_created_once_and_updated_in_place(prefect_api, deployed):
    from deploy.pools import K8S_POOL, LOCAL_POOL, k8s_job_template

    first, again, image = deployed["pools"]
    assert first == {LOCAL_POOL: "created", K8S_POOL: "created"}
    assert again == {LOCAL_POOL: "unchanged", K8S_POOL: "unchanged"}
    assert image == {K8S_POOL: "updated"}
    with _client(prefect_api) as client:
        local, k8s = client.read_work_pool(LOCAL_POOL), client.read_work_pool(K8S_POOL)
    assert local.type == "process" and k8s.type == "kubernetes"  # accepted without prefect-kubernetes installed
    assert k8s.base_job_template == k8s_job_template(image="registry.example.com/cbt-mover:9.9.9")
    assert k8s.base_job_template["variables"]["properties"]["service_account_name"]["default"] == "cbt-mover-controller"


@pytest.mark.slow
def test_pools_cli_refuses_without_api_url_and_a_pool_of_another_type(prefect_api, deployed, capsys):
    from prefect.client.schemas.actions import WorkPoolCreate
    from prefect.settings import PREFECT_API_URL, temporary_settings

    from deploy.pools import PoolError, ensure_pool, main

    with temporary_settings(restore_defaults={PREFECT_API_URL}):
        assert main([]) == 2
    assert "PREFECT_API_URL is not set" in capsys.readouterr().err
    with _client(prefect_api) as client:
        client.create_work_pool(WorkPoolCreate(name="cbt-mover-other", type="process"))
        with pytest.raises(PoolError, match="exists with type 'process', not 'kubernetes'"):
            ensure_pool(client, "cbt-mover-other", "kubernetes", {}, "x")
    with temporary_settings({PREFECT_API_URL: prefect_api["url"]}):
        assert main(["--only", "local"]) == 0
    assert "work pool cbt-mover-local: unchanged" in capsys.readouterr().out


@pytest.mark.slow
def test_deploy_registers_schedules_parameters_and_pull_steps(prefect_api, deployed):
    from prefect.client.schemas.filters import DeploymentFilter, DeploymentFilterName

    wanted = {d["name"]: d for d in deployments().values() if d["entrypoint"] not in deployed["missing"]}
    with _client(prefect_api) as client:
        found = {
            d.name: d
            for d in client.read_deployments(
                deployment_filter=DeploymentFilter(name=DeploymentFilterName(any_=sorted(wanted)))
            )
        }
        flows = {d.name: client.read_flow(d.flow_id).name for d in found.values()}
    assert set(found) == set(wanted)
    for name, spec in wanted.items():
        got = found[name]
        assert flows[name] == FLOW_NAMES[name]
        assert got.work_pool_name == spec["work_pool"]["name"]
        assert got.parameters == spec["parameters"], name
        assert sorted(
            (
                {"cron": s.schedule.cron, "timezone": s.schedule.timezone, "slug": s.slug, "parameters": s.parameters}
                for s in got.schedules
            ),
            key=json.dumps,
        ) == sorted(
            (
                {
                    "cron": s["cron"],
                    "timezone": s["timezone"],
                    "slug": s.get("slug"),
                    "parameters": s.get("parameters", {}),
                }
                for s in spec["schedules"]
            ),
            key=json.dumps,
        ), name
        assert all(s.active for s in got.schedules)
        assert got.pull_steps == [{"prefect.deployments.steps.set_working_directory": {"directory": str(ROOT)}}]
        assert got.enforce_parameter_schema is True
        assert got.entrypoint == spec["entrypoint"]
        if "concurrency_limit" in spec:
            assert got.global_concurrency_limit.limit == spec["concurrency_limit"]["limit"]
            assert got.concurrency_options.collision_strategy == spec["concurrency_limit"]["collision_strategy"]
        assert set(got.parameter_openapi_schema["properties"]) >= set(spec["parameters"])
    if deployed["missing"]:
        pytest.skip(f"registered all but {deployed['missing']} (not in the tree yet)")


@pytest.mark.slow
def test_a_process_worker_runs_the_maintenance_deployment(prefect_api, deployed, moto_server, tmp_path):
    """The local target end to end: a run of the maintenance deployment, picked up by ``prefect worker
    start --run-once`` on the process pool, pulled into the checkout, expires the older of two backups
    in a moto S3 repository by its policy's retention (the demo policy with keep_last 1)."""
    from deploy.pools import LOCAL_POOL

    if "flows/maintenance.py:maintain_repo" in deployed["missing"]:
        pytest.skip("flows/maintenance.py is not in the tree yet")
    bucket = f"deploy-{os.getpid()}"
    moto_server.client().create_bucket(Bucket=bucket)
    repo = f"s3://{bucket}/repo"
    s3_env = {**moto_server.env, "PATH": os.environ.get("PATH", "/usr/bin:/bin")}

    def cli(*args: str) -> str:
        return subprocess.run(
            [sys.executable, "-m", "movers", *args, "--repo", repo],
            check=True,
            env=s3_env,
            capture_output=True,
            text=True,
            timeout=60,
        ).stdout

    def backups() -> list[str]:
        return [b["backup_id"] for b in json.loads(cli("ls", "--volume", "demo/data", "--json"))["backups"]]

    policy = yaml.safe_load((POLICIES / "demo.yaml").read_text())
    assert policy["namespace"] == "demo"
    cli("init", "--insecure-no-encryption")
    image = tmp_path / "data.img"
    for i in range(2):  # as the policy's runs record it: its retention judges only its own backups
        image.write_bytes(bytes([i]) * 4096 + os.urandom(60_000))
        made_by = f"cbt-mover.io/policy={policy['name']}"
        cli("backup", "--volume", "demo/data", "--device", str(image), "--scan", "--tag", made_by)
    before = backups()
    assert len(before) == 2
    policy["repository"]["url"] = repo
    policy["retention"] = {"keep_last": 1}
    policy_path = tmp_path / "policy.yaml"
    policy_path.write_text(yaml.safe_dump(policy))

    with _client(prefect_api) as client:
        deployment = client.read_deployment_by_name("maintain-repo/maintenance")
        run = client.create_flow_run_from_deployment(
            deployment.id, parameters={"request": {"repo": repo, "policy_paths": [str(policy_path)]}}
        )
    log_path = tmp_path / "worker.log"
    with open(log_path, "wb") as log:
        worker = subprocess.Popen(
            [PREFECT, "worker", "start", "--pool", LOCAL_POOL, "--run-once"],
            cwd=tmp_path,
            env={**prefect_api["env"], **moto_server.env},
            stdout=log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
        )
        try:
            worker.wait(timeout=150)
        finally:
            _stop_group(worker)
    from prefect.client.schemas.filters import FlowRunFilter, FlowRunFilterId

    with _client(prefect_api) as client:
        state = client.read_flow_run(run.id).state
        keys = {a.key for a in client.read_artifacts(flow_run_filter=FlowRunFilter(id=FlowRunFilterId(any_=[run.id])))}
    output = log_path.read_text(errors="replace")
    assert state is not None and state.is_completed(), f"{state}\n{output[-4000:]}"
    assert "Executing deployment step: set_working_directory" in output, output[-4000:]
    assert sorted(backups()) == sorted(before)[1:], (before, backups())  # ids sort by creation time: oldest gone
    assert any(key.endswith("-retention") for key in keys) and any(key.endswith("-verify") for key in keys), keys
