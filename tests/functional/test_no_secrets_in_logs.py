"""No credential reaches what the mover prints, at any log level: the CLI at ``--log-level DEBUG``
against S3 over HTTP (moto), the log redaction on its own, endpoint URLs carrying credentials, and
the pod specs the flows create (credentials only by Secret reference, the repository key as a file of the
Secret)."""

from __future__ import annotations

import base64
import io
import logging
import re
from urllib.parse import quote, quote_plus

import pytest

from movers.cbt.tokens import FileToken
from movers.kube import manifests as m
from movers.kube import podspec
from movers.redaction import KNOWN, RedactingFilter, Redactor
from tests.functional.test_cli import assert_one_line_error, run
from tests.volumes import make_image, sha256_file

MiB = 1 << 20
ACCESS_KEY = "AKIAQXZVWDISTINCT7ID"
SECRET_KEY = "sEcReT/k3y+Zq9wX2v=LmN8pRt5yHu4jKo1"
SESSION_TOKEN = "FwoGZXIvYXdzE/Sess1onT0ken+Qw3rTy==Uiop9AsDfGh"
PASSPHRASE = "correct horse battery staple 7f3a"
# the headers and query parameters that carry credentials in botocore's request dumps
CREDENTIAL_MARKERS = re.compile(
    r"authorization|x-amz-security-token|x-amz-credential|x-amz-signature|credential=", re.I
)


def forms(secret: str) -> set[str]:
    """The ways a secret could be printed: as is, URL-encoded, base64."""
    return {secret, quote(secret, safe=""), quote_plus(secret), base64.b64encode(secret.encode()).decode()}


def assert_no_credentials(text: str, *secrets: str) -> None:
    for secret in secrets:
        for form in forms(secret):
            assert form not in text, f"{form!r} printed"
    marker = CREDENTIAL_MARKERS.search(text)
    assert marker is None, text[max(0, marker.start() - 200) : marker.end() + 200]


@pytest.fixture
def s3_env(s3_bucket):
    endpoint, bucket = s3_bucket
    env = {
        "AWS_ACCESS_KEY_ID": ACCESS_KEY,
        "AWS_SECRET_ACCESS_KEY": SECRET_KEY,
        "AWS_SESSION_TOKEN": SESSION_TOKEN,
        "AWS_REGION": "us-east-1",
        "AWS_ENDPOINT_URL": endpoint,
        "CBT_MOVER_PASSWORD": PASSPHRASE,
        "CBT_MOVER_KDF_COST": "10",
    }
    return env, f"s3://{bucket}/team/repo"


def test_debug_logs_of_every_s3_command_carry_no_credential(s3_env, tmp_path):
    env, repo = s3_env
    image, out = tmp_path / "vol.img", tmp_path / "out.img"
    make_image(image, 4 * MiB, seed=13)
    debug = ["--repo", repo, "--log-level", "DEBUG"]
    procs = [
        run("init", *debug, env=env, check_rc=0),
        run("backup", *debug, "--volume", "ns/pvc", "--device", image, "--scan", env=env, check_rc=0),
        run("restore", *debug, "--volume", "ns/pvc", "--device", out, env=env, check_rc=0),
        run("ls", *debug, env=env, check_rc=0),
        run("verify", *debug, env=env, check_rc=0),
        run("ls", "--repo", f"{repo}-missing/x", "--log-level", "DEBUG", env=env),  # a failure, traceback logged
    ]
    assert sha256_file(out) == sha256_file(image)
    text = "".join(p.stdout + p.stderr for p in procs)
    assert_no_credentials(text, ACCESS_KEY, SECRET_KEY, SESSION_TOKEN, PASSPHRASE)
    assert " DEBUG movers: command failed" in procs[-1].stderr, "our own DEBUG logging stays on"
    assert "Traceback" in procs[-1].stderr, "with the failure's traceback"
    assert " DEBUG botocore" not in text and " DEBUG urllib3" not in text


def test_an_endpoint_with_credentials_in_it_is_refused_without_echoing_them():
    endpoint = "http://someone:Pa55wordInUrl@127.0.0.1:9"
    proc = run("ls", "--repo", "s3://bucket/x", "--s3-endpoint", endpoint, env={"AWS_REGION": "us-east-1"})
    assert_one_line_error(proc, 2, "http://***@127.0.0.1:9")
    assert "Pa55wordInUrl" not in proc.stderr + proc.stdout and "someone" not in proc.stderr
    from_env = {
        "AWS_REGION": "us-east-1",
        "AWS_ENDPOINT_URL": endpoint,
        "AWS_ACCESS_KEY_ID": "a",
        "AWS_SECRET_ACCESS_KEY": "b",
    }
    proc = run("ls", "--repo", "s3://bucket/x", env=from_env)
    assert_one_line_error(proc, 2, "AWS_ENDPOINT_URL")
    assert "Pa55wordInUrl" not in proc.stderr + proc.stdout


def _logged(redactor: Redactor, emit) -> str:
    stream = io.StringIO()
    handler = logging.StreamHandler(stream)
    handler.addFilter(RedactingFilter(redactor))
    logger = logging.getLogger("tests.no_secrets")
    logger.addHandler(handler)
    logger.propagate = False
    logger.setLevel(logging.DEBUG)
    try:
        emit(logger)
    finally:
        logger.removeHandler(handler)
        logger.propagate = True
        logger.setLevel(logging.NOTSET)
    return stream.getvalue()


def test_the_filter_redacts_known_values_in_messages_arguments_tracebacks_and_stacks():
    redactor = Redactor(SECRET_KEY, SESSION_TOKEN)

    def emit(logger):
        logger.debug("key %s token %r", SECRET_KEY, {"t": quote(SESSION_TOKEN, safe="")})
        logger.debug(f"inline {SECRET_KEY}", stack_info=True)
        try:
            raise ValueError(f"failed with {SESSION_TOKEN}")
        except ValueError:
            logger.debug("boom", exc_info=True)

    text = _logged(redactor, emit)
    assert_no_credentials(text, SECRET_KEY, SESSION_TOKEN)
    assert "key *** token {'t': '***'}" in text and "Traceback" in text and "ValueError: failed with ***" in text


def test_the_filter_redacts_credential_headers_and_query_parameters_of_unknown_values():
    dump = (
        "Sending http request: <AWSPreparedRequest method=GET, url=http://h/b?X-Amz-Credential=AKIDX%2F2026&"
        "X-Amz-Signature=abc123&X-Amz-Security-Token=tokQ7%2Bq, headers={'Authorization': "
        "b'AWS4-HMAC-SHA256 Credential=AKIDX/20260101/us-east-1/s3/aws4_request, SignedHeaders=host, "
        "Signature=deadbeef', 'X-Amz-Security-Token': b'tokQ7+q'}>\ncanonical:\nx-amz-security-token:tokQ7+q\n"
        "Authorization: Bearer eyJhbGciOi.payload.sig"
    )
    text = _logged(Redactor(), lambda logger: logger.debug("%s", dump))
    for value in ("AKIDX", "abc123", "tokQ7", "deadbeef", "eyJhbGciOi", "payload"):
        assert value not in text, value
    assert "url=http://h/b?X-Amz-Credential=***&" in text and "canonical:" in text, "the rest stays readable"


def test_a_cbt_token_read_from_its_file_is_redacted_from_every_log_line(tmp_path):
    token = "eyJhbGciOiJSUzI1NiJ9.distinctive-cbt-token.sig"
    (tmp_path / "token").write_text(token + "\n")
    assert FileToken(str(tmp_path / "token")).token() == token
    assert KNOWN(f"sent {token}") == "sent ***"


def test_a_redactor_shows_nothing_in_its_repr_and_skips_values_too_short_to_matter():
    redactor = Redactor(SECRET_KEY, "ab")
    assert SECRET_KEY not in repr(redactor) and redactor("ab and " + SECRET_KEY) == "ab and ***"


@pytest.mark.parametrize("role", [m.MOVER, m.WRITER])
def test_pod_specs_take_credentials_only_from_the_secret(role):
    args = ["restore", "--volume", "v"] if role == m.WRITER else ["backup", "--volume", "v"]
    pod = m.mover_pod(
        "p",
        "ns",
        profile=podspec.MoverProfile(image="i", service_account="s"),
        task=podspec.MoverTask(args=args, pvc="c", role=role, cbt_audience="aud" if role == m.MOVER else None),
        repo=podspec.RepoAccess("repo-creds", ["password", "keyfile"]),
    )
    container = pod["spec"]["containers"][0]
    refs = {e["name"]: e["valueFrom"]["secretKeyRef"]["name"] for e in container["env"] if "valueFrom" in e}
    assert {var: "repo-creds" for var, _key, _optional in m.REPO_SECRET_KEYS} == refs
    assert "CBT_MOVER_PASSWORD" not in refs, "the passphrase is never an environment variable"
    literal = {e["name"]: e["value"] for e in container["env"] if "value" in e}
    assert literal == {var: f"{m.REPO_KEY_DIR}/{key}" for key, var in m.REPO_KEY_FILES}, "paths of files only"
    [key_volume] = [v for v in pod["spec"]["volumes"] if v["name"] == m.REPO_KEY_VOLUME]
    assert key_volume["secret"]["secretName"] == "repo-creds" and key_volume["secret"]["defaultMode"] == 0o400
    assert {"name": m.REPO_KEY_VOLUME, "mountPath": m.REPO_KEY_DIR, "readOnly": True} in container["volumeMounts"]
    flags = [a for a in container["args"] if a.startswith("--")]
    assert flags and not [f for f in flags if re.search(r"password|secret|key|credential|session", f)], flags


WORKER = """
import logging, sys
logging.basicConfig(stream=sys.stderr, level=logging.DEBUG)   # an operator's DEBUG logging config
logging.getLogger("botocore").setLevel(logging.DEBUG)
import tasks  # what a Prefect worker imports with the flows
from movers.repo.store import open_store
print(list(open_store(sys.argv[1]).list("")))
logging.getLogger("movers.test").debug("our own DEBUG line")
"""


def test_a_flow_process_logging_at_debug_prints_no_credential_of_its_in_process_s3_calls(s3_env):
    """Tasks open repositories in the Prefect worker's process: an operator's DEBUG logging (botocore included)
    there must not print request dumps either."""
    import os
    import subprocess
    import sys

    env, repo = s3_env
    base = {k: v for k, v in os.environ.items() if not k.startswith(("AWS_", "CBT_MOVER_"))}
    proc = subprocess.run(
        [sys.executable, "-c", WORKER, repo], capture_output=True, text=True, env={**base, **env}, timeout=120
    )
    assert proc.returncode == 0, proc.stderr
    assert "our own DEBUG line" in proc.stderr
    assert_no_credentials(proc.stdout + proc.stderr, ACCESS_KEY, SECRET_KEY, SESSION_TOKEN, PASSPHRASE)
    assert "DEBUG:botocore" not in proc.stderr and "DEBUG:urllib3" not in proc.stderr
