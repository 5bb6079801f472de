"""The Pushgateway push with credentials from the environment, never echoed.

Basic auth against a real Pushgateway 1.5.1 (Debian's) started here with `--web.config.file`
(exporter-toolkit's basic_auth_users, a bcrypt hash made by the system's crypt(3)). The Pushgateway
cannot check bearer tokens, so the bearer case runs against a stand-in: a small HTTP server on
127.0.0.1 started by the test that accepts one token and records what each request carried.
"""

from __future__ import annotations

import base64
import threading
import urllib.error
import urllib.request
import warnings
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, ClassVar

import pytest
from promhelpers import START_DEADLINE_S, Proc, binary, wait_until

from canary.config.load import validate_config
from canary.core.ports import free_port
from canary.export.prometheus.publish import export_run
from tests.support.sample import sample_config, sample_run

USER, PASSWORD, TOKEN = "canary", "pg-s3cret-pw", "tok-s3cret-123"


def bcrypt_hash(password: str) -> str:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        import crypt  # the system's crypt(3) (libxcrypt) makes the bcrypt hash the Pushgateway checks

        return crypt.crypt(password, crypt.mksalt(crypt.METHOD_BLOWFISH))


@pytest.fixture(scope="module")
def guarded_gateway(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A real Pushgateway that takes only USER:PASSWORD (basic auth)."""
    workdir = tmp_path_factory.mktemp("pushgateway-auth")
    web = workdir / "web.yml"
    web.write_text(f"basic_auth_users:\n  {USER}: '{bcrypt_hash(PASSWORD)}'\n")
    port = free_port()
    gateway = Proc(
        "pushgateway",
        [
            binary("PUSHGATEWAY_BIN", "/usr/bin/prometheus-pushgateway"),
            f"--web.listen-address=127.0.0.1:{port}",
            f"--web.config.file={web}",
            f"--persistence.file={workdir / 'store'}",
            "--log.level=warn",
        ],
        workdir / "pushgateway.log",
    )
    gateway.start()
    url = f"http://127.0.0.1:{port}"
    try:

        def answers() -> bool:
            try:
                urllib.request.urlopen(f"{url}/-/ready", timeout=2)
            except urllib.error.HTTPError as exc:
                return exc.code == 401  # up, and guarding its door
            return False

        wait_until("the guarded pushgateway", answers, START_DEADLINE_S)
        yield url
    finally:
        gateway.stop()


def config_with(tmp_path: Path, pushgateway: dict[str, Any]) -> Any:
    data = sample_config().model_dump(mode="json")
    data["export"]["pushgateway"] = pushgateway
    data["export"]["results_dir"] = str(tmp_path)
    return validate_config(data, "push auth config")


def metrics_with_auth(url: str, user: str, password: str) -> str:
    request = urllib.request.Request(f"{url}/metrics")
    request.add_header("Authorization", "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode())
    with urllib.request.urlopen(request, timeout=5) as response:
        return str(response.read().decode())


def test_basic_auth_from_the_environment_reaches_a_guarded_pushgateway(guarded_gateway: str, tmp_path: Path) -> None:
    run = sample_run()
    settings = {"url": guarded_gateway, "username": USER, "password_env": "CANARY_TEST_PUSH_PASSWORD", "scope": "auth"}
    config = config_with(tmp_path, settings)
    run_dir = tmp_path / run.run_id
    run_dir.mkdir()
    lines = export_run(run, config, run_dir, env={"CANARY_TEST_PUSH_PASSWORD": PASSWORD}, backoff_s=0.01)
    assert any(line.startswith(f"pushgateway: pushed run {run.run_id}") for line in lines), lines
    assert 'scope="auth"' in metrics_with_auth(guarded_gateway, USER, PASSWORD)

    # a wrong password: the gateway refuses (401), the line says so without any credential
    wrong = export_run(run, config, run_dir, env={"CANARY_TEST_PUSH_PASSWORD": "not-it-xyz"}, backoff_s=0.01)
    text = "\n".join(wrong)
    assert "HTTP 401" in text and "REJECTED" in text, wrong
    assert "not-it-xyz" not in text and PASSWORD not in text

    # the variable unset: nothing pushed, the run spooled, the line names the variable only
    unset = export_run(run, config, run_dir, env={}, backoff_s=0.01)
    assert "export.pushgateway.password_env names the environment variable CANARY_TEST_PUSH_PASSWORD" in unset[0]
    assert "spooled" in unset[0]


def test_a_pushgateway_url_with_credentials_is_never_echoed(guarded_gateway: str, tmp_path: Path) -> None:
    run = sample_run()
    config = config_with(tmp_path, {"scope": "auth-env"})
    run_dir = tmp_path / run.run_id
    run_dir.mkdir()
    with_creds = guarded_gateway.replace("http://", f"http://{USER}:{PASSWORD}@")
    lines = export_run(run, config, run_dir, env={"PUSHGATEWAY_URL": with_creds}, backoff_s=0.01)
    text = "\n".join(lines)
    assert "carries credentials" in text and "***@127.0.0.1" in text, lines
    assert PASSWORD not in text and USER + ":" not in text


class _TokenGate(BaseHTTPRequestHandler):
    """The stand-in gateway: 200 for `Bearer TOKEN`, else 401; records every Authorization."""

    seen: ClassVar[list[str | None]] = []

    def do_PUT(self) -> None:
        self.rfile.read(int(self.headers.get("Content-Length", "0")))
        auth = self.headers.get("Authorization")
        type(self).seen.append(auth)
        self.send_response(200 if auth == f"Bearer {TOKEN}" else 401)
        self.end_headers()
        self.wfile.write(b"" if auth == f"Bearer {TOKEN}" else b"unauthorized")

    def log_message(self, format: str, *args: Any) -> None:
        return


@pytest.fixture()
def token_gate() -> Iterator[str]:
    _TokenGate.seen = []
    server = ThreadingHTTPServer(("127.0.0.1", 0), _TokenGate)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        thread.join(timeout=10)


def test_a_bearer_token_from_the_environment_is_sent(token_gate: str, tmp_path: Path) -> None:
    run = sample_run()
    config = config_with(tmp_path, {"url": token_gate, "token_env": "CANARY_TEST_PUSH_TOKEN"})
    run_dir = tmp_path / run.run_id
    run_dir.mkdir()
    lines = export_run(run, config, run_dir, env={"CANARY_TEST_PUSH_TOKEN": TOKEN}, backoff_s=0.01)
    assert any(line.startswith(f"pushgateway: pushed run {run.run_id}") for line in lines), lines
    assert _TokenGate.seen == [f"Bearer {TOKEN}"]
    refused = export_run(run, config, run_dir, env={"CANARY_TEST_PUSH_TOKEN": "other-tok-999"}, backoff_s=0.01)
    assert "HTTP 401" in "\n".join(refused) and "other-tok-999" not in "\n".join(refused)
    assert TOKEN not in repr(config.export.pushgateway)
