"""Hub models: a model.path like org/name resolved through huggingface_hub, against a hub cache laid out on disk
(HF_HOME in a temporary folder; no network: offline, or an endpoint on a closed local port)."""

import http.server
import json
import shutil
import subprocess
import threading

import pytest
import yaml

from llmcompare import scenario
from llmcompare.engines.server import free_port
from llmcompare.errors import ScenarioError
from llmcompare.setup import hub, model

REPO = "acme/tiny-qwen"
COMMIT = "0123456789abcdef0123456789abcdef01234567"


def lay_out_hub_cache(hf_home, model_dir, repo=REPO):
    """The layout huggingface_hub writes: hub/models--org--name/{refs/main, snapshots/<commit>/...}."""
    store = hf_home / "hub" / ("models--" + repo.replace("/", "--"))
    snap = store / "snapshots" / COMMIT
    shutil.copytree(model_dir, snap)
    (store / "refs").mkdir(parents=True)
    (store / "refs" / "main").write_text(COMMIT)
    return snap


@pytest.fixture
def hub_cache(tmp_path, monkeypatch, tiny_model):
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf"))
    monkeypatch.delenv("HF_HUB_CACHE", raising=False)
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    return lay_out_hub_cache(tmp_path / "hf", tiny_model)


def test_hub_ids_and_local_paths():
    assert hub.is_hub_id("Qwen/Qwen2.5-7B-Instruct-AWQ")
    for local in ("/models/x", "./models/x", "~/m", "a/b/c", "../x/y", "noslash"):
        assert not hub.is_hub_id(local), local


def test_offline_a_hub_id_is_the_cached_snapshot(hub_cache):
    assert hub.resolve(REPO) == str(hub_cache)
    assert hub.cached(REPO) == str(hub_cache)
    assert hub.cached("acme/absent") is None


@pytest.fixture
def models_server():
    """A server that answers /v1/models only: an `openai` engine that passes serve-bench's checks."""

    class Models(http.server.BaseHTTPRequestHandler):
        def do_GET(self):
            body = json.dumps({"object": "list", "data": [{"id": "m", "object": "model"}]}).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args):
            pass

    srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Models)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{srv.server_address[1]}"
    srv.shutdown()


def _scenario(tmp_path, model: dict, base_url="http://127.0.0.1:9"):
    f = tmp_path / "s.yaml"
    f.write_text(yaml.safe_dump({"model": model, "load": {"concurrency": [1]}, "output_dir": str(tmp_path / "runs"),
                                 "engines": [{"name": "o", "kind": "openai", "base_url": base_url}]}))
    return f


def test_serve_bench_hands_engines_the_local_snapshot_and_the_tokenizer_too(tmp_path, hub_cache):
    s = scenario.load(str(_scenario(tmp_path, {"path": REPO, "tokenizer": REPO,
                                               "make": {"preset": "tiny"}})))  # make: for local paths only
    assert model.prepare_model(s) == str(hub_cache)
    assert s.model.tokenizer == str(hub_cache)
    assert not (tmp_path / "acme").exists()


def test_offline_and_not_cached_is_an_error_naming_the_id(tmp_path, hub_cache, cli, models_server):
    with pytest.raises(ScenarioError, match=r"model.path: 'acme/absent' is neither a local directory nor a model "
                                            r"the Hugging Face hub could give: HF_HUB_OFFLINE is set"):
        hub.resolve("acme/absent")
    p = subprocess.run([*cli, "serve-bench", str(_scenario(tmp_path, {"path": "acme/absent"}, models_server))],
                       capture_output=True, text=True, timeout=120)
    assert p.returncode == 2 and "'acme/absent' is neither a local directory" in p.stderr, p.stderr
    assert "hf download acme/absent" in p.stderr and not (tmp_path / "runs").exists()


def test_hub_unreachable_falls_back_to_the_cache_then_names_the_id(hub_cache, monkeypatch):
    monkeypatch.delenv("HF_HUB_OFFLINE")
    monkeypatch.setenv("HF_ENDPOINT", f"http://127.0.0.1:{free_port()}")  # nothing listens there
    monkeypatch.setenv("HF_HUB_ETAG_TIMEOUT", "2")
    assert hub.resolve(REPO) == str(hub_cache)
    with pytest.raises(ScenarioError, match=r"'acme/absent' is neither .* it could not be downloaded"):
        hub.resolve("acme/absent")
    assert hub.remote_size(REPO) is None


def test_a_tokenizer_from_the_hub_for_a_local_model(tmp_path, hub_cache, tiny_model):
    s = scenario.load(str(_scenario(tmp_path, {"path": tiny_model, "tokenizer": REPO})))
    assert model.prepare_model(s) == tiny_model and s.model.tokenizer == str(hub_cache)
