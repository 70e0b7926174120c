"""The `purecover serve` command in-process: the vLLM backend and the API key through the command line, its help
and its errors (missing extra, unset key variable, bad directory, bad settings, taken port). The command in a
real subprocess is tests/serve/test_process.py."""

from __future__ import annotations

import socket
import sys
from pathlib import Path

import httpx
import numpy as np
import pytest

from purecover.cli import main
from tests.serve.conftest import HTTP_TIMEOUT, docs_of, fake_vllm_logprobs, wire

REPO = Path(__file__).resolve().parents[2]
START_TIMEOUT = 120.0  # seconds for a server process to load the model and listen


def test_cli_vllm_backend_and_api_key_env(selector_dir, selector, plain_model, candidates, monkeypatch):
    """`purecover serve DIR --backend vllm --api-key-env NAME`: the selector comes from
    Selector.from_pretrained(backend="vllm") (log-prob space, tau3_logprob), the key from the environment;
    the selector is closed when the server stops."""
    import purecover.serve.server as server_module
    from purecover.serve.server import serve_in_thread

    fake = fake_vllm_logprobs(plain_model)
    monkeypatch.setitem(sys.modules, "vllm", fake)
    monkeypatch.setenv("PURECOVER_TEST_KEY", "k-123")
    seen: dict = {}
    rec = candidates[0]
    body = {"query": rec["question"], "documents": wire(docs_of(rec))}

    def fake_run_server(app, *, host, port, log_level, timeout_graceful_shutdown, access_log, head_timeout,
                        max_connections):
        seen.update(host=host, port=port, app=app, timeout=timeout_graceful_shutdown, head_timeout=head_timeout,
                    max_connections=max_connections)
        with serve_in_thread(app) as url, httpx.Client(base_url=url, timeout=HTTP_TIMEOUT) as c:
            seen["health"] = c.get("/health").json()
            seen["no_key"] = c.post("/v1/select", json=body).status_code
            seen["select"] = c.post("/v1/select", json=body, headers={"Authorization": "Bearer k-123"}).json()

    monkeypatch.setattr(server_module, "run_server", fake_run_server)
    code = main(["serve", str(selector_dir), "--backend", "vllm", "--api-key-env", "PURECOVER_TEST_KEY",
                 "--host", "127.0.0.1", "--port", "8123", "--max-batch", "4", "--shutdown-timeout", "5",
                 "--head-timeout", "3", "--max-connections", "64"])
    assert code == 0
    assert (seen["host"], seen["port"], seen["timeout"]) == ("127.0.0.1", 8123, 5.0)
    assert (seen["head_timeout"], seen["max_connections"]) == (3.0, 64)
    assert fake.llm_kwargs[-1]["model"] == str(selector_dir)
    assert seen["health"] == {"status": "ok", "model": selector_dir.name, "k1": selector.k1, "backend": "vllm"}
    assert seen["no_key"] == 401
    vsel = seen["app"].state.service.selector
    assert seen["select"]["score_space"] == "logprob"
    assert seen["select"]["threshold"] == pytest.approx(selector.config.tau3_logprob)
    from purecover.models.selection import identifier_log_softmax, select_from_scores

    hf = selector.select(rec["question"], docs_of(rec))
    np.testing.assert_allclose(seen["select"]["scores"], identifier_log_softmax(hf.logits), atol=1e-4, rtol=0)
    assert seen["select"]["selected"] == select_from_scores(seen["select"]["scores"], vsel.threshold,
                                                            vsel.min_select, vsel.k_max)
    assert vsel.backend.llm is None  # closed after the server stopped


def test_cli_errors(selector_dir, tmp_path, monkeypatch, capsys):
    monkeypatch.delenv("PURECOVER_UNSET_KEY", raising=False)
    assert main(["serve", str(selector_dir), "--api-key-env", "PURECOVER_UNSET_KEY"]) == 1
    err = capsys.readouterr().err
    assert "PURECOVER_UNSET_KEY" in err and "not set" in err
    assert main(["serve", str(tmp_path)]) == 1
    assert "not a selector directory" in capsys.readouterr().err
    # bad options fail while the command line is read, before any model loads
    from purecover.models import selector as selector_module

    def no_load(*args, **kwargs):
        raise AssertionError("the selector was loaded before the options were checked")

    monkeypatch.setattr(selector_module.Selector, "from_pretrained", no_load)
    for option, value, says in (("--max-batch", "0", "≥ 1"), ("--max-body-mb", "0", "> 0"),
                                ("--max-body-mb", "inf", "finite"), ("--max-body-mb", "nan", "finite"),
                                ("--port", "99999", "≤ 65535"), ("--port", "http", "not an integer"),
                                ("--head-timeout", "0", "> 0"), ("--max-connections", "0", "≥ 1"),
                                ("--shutdown-timeout", "-1", "≥ 0")):
        with pytest.raises(SystemExit) as exit_info:
            main(["serve", str(selector_dir), option, value])
        err = capsys.readouterr().err
        assert exit_info.value.code == 2 and option in err and says in err, (option, value, err)
    monkeypatch.undo()
    monkeypatch.setitem(sys.modules, "uvicorn", None)  # the serve extra is not installed
    assert main(["serve", str(selector_dir)]) == 1
    err = capsys.readouterr().err
    assert "pip install -e '.[serve]'" in err and "uvicorn" in err


def test_help_lists_serve_and_its_options(capsys):
    with pytest.raises(SystemExit):
        main(["--help"])
    assert "serve" in capsys.readouterr().out
    with pytest.raises(SystemExit):
        main(["serve", "--help"])
    out = capsys.readouterr().out
    for option in ("SELECTOR_DIR", "--host", "--port", "--backend", "--max-batch", "--max-wait-ms", "--max-queue", "--max-body-mb",
                   "--model-name", "--api-key-env", "--device", "--dtype", "--log-level", "--head-timeout",
                   "--max-connections"):
        assert option in out
    assert "--api-key " not in out  # the key itself is never an option


def test_run_server_reports_a_taken_port(served_selector):
    from purecover.serve.app import create_app
    from purecover.serve.server import run_server

    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        with pytest.raises(RuntimeError, match=f"could not start on 127.0.0.1:{port}"):
            run_server(create_app(served_selector, model_name="x"), port=port, log_level="critical")
