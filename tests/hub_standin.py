"""A local stand-in for the Hugging Face Hub's HTTP API (only the network boundary is replaced).

A threaded `http.server` on 127.0.0.1 implementing just what `huggingface_hub` 2.x calls for
``create_repo``, ``create_branch``, ``upload_folder`` (preupload, tree listing for delete_patterns,
commit) and ``repo_info``, with answers shaped like the real Hub's. Preupload answers
``"uploadMode": "regular"`` so file contents travel base64-encoded inside the ndjson commit (no
LFS/xet); committed files are stored per (repo type, repo id, branch) for the test to check. Any
other request is recorded in ``unknown`` and answered 404, and the fixture fails at teardown when
there was one.

    def test_x(hub):                 # sets HF_ENDPOINT, unsets offline mode for this test only
        ...push...
        hub.files("model", "me/sel")  # {path: bytes}
"""

from __future__ import annotations

import base64
import hashlib
import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, unquote, urlsplit

import pytest

__all__ = ["HubStandIn", "hub"]


def _git_sha1(data: bytes) -> str:
    return hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()


class HubStandIn:
    """State of the fake Hub: repos -> branches -> {path: bytes}, commits, and the requests it saw."""

    def __init__(self) -> None:
        self.repos: dict[tuple[str, str], dict[str, Any]] = {}
        self.requests: list[tuple[str, str]] = []
        self.unknown: list[str] = []
        self.commits: list[dict[str, Any]] = []
        self.lock = threading.Lock()
        self.server = ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        self.server.daemon_threads = True
        self.endpoint = f"http://127.0.0.1:{self.server.server_address[1]}"
        self.thread = threading.Thread(target=self.server.serve_forever, name="hub-standin", daemon=True)

    def start(self) -> HubStandIn:
        self.thread.start()
        return self

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()
        self.thread.join(timeout=5)

    def files(self, repo_type: str, repo_id: str, branch: str = "main") -> dict[str, bytes]:
        """The committed files of a repo's branch (path -> bytes)."""
        return dict(self.repos[(repo_type, repo_id)]["branches"][branch]["files"])

    def _url(self, repo_type: str, repo_id: str) -> str:
        return f"{self.endpoint}/{'' if repo_type == 'model' else repo_type + 's/'}{repo_id}"

    # ------------------------------------------------------------------ request handling
    def _handler(self) -> type[BaseHTTPRequestHandler]:
        hub = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args: Any) -> None:  # quiet
                pass

            def _send(self, status: int, body: Any, headers: dict[str, str] | None = None) -> None:
                data = json.dumps(body).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                for k, v in (headers or {}).items():
                    self.send_header(k, v)
                self.end_headers()
                self.wfile.write(data)

            def _body(self) -> bytes:
                n = int(self.headers.get("Content-Length") or 0)
                return self.rfile.read(n) if n else b""

            def do_GET(self) -> None:
                self._dispatch("GET")

            def do_POST(self) -> None:
                self._dispatch("POST")

            def _dispatch(self, method: str) -> None:
                url = urlsplit(self.path)
                parts = [unquote(p) for p in url.path.strip("/").split("/")]
                body = self._body() if method == "POST" else b""
                with hub.lock:
                    hub.requests.append((method, url.path))
                    try:
                        status, answer = hub._route(method, parts, body, parse_qs(url.query))
                    except Exception as exc:  # a bug in the stand-in: visible, not a hang
                        status, answer = 500, {"error": f"stand-in error: {exc!r}"}
                    if status == 404 and answer is None:
                        hub.unknown.append(f"{method} {self.path}")
                        answer = {"error": f"stand-in: unknown endpoint {method} {url.path}"}
                self._send(status, answer)

        return Handler

    def _repo(self, repo_type: str, repo_id: str) -> dict[str, Any] | None:
        return self.repos.get((repo_type, repo_id))

    def _route(self, method: str, parts: list[str], body: bytes, query: dict[str, list[str]]) -> tuple[int, Any]:
        if method == "POST" and parts == ["api", "repos", "create"]:
            payload = json.loads(body)
            repo_type = payload.get("type") or "model"
            repo_id = f"{payload['organization']}/{payload['name']}" if payload.get("organization") else payload["name"]
            url = self._url(repo_type, repo_id)
            if (repo_type, repo_id) in self.repos:
                return 409, {"error": "You already created this model repo", "url": url}
            sha = hashlib.sha1(f"init:{repo_id}".encode()).hexdigest()
            self.repos[(repo_type, repo_id)] = {
                "private": payload.get("visibility") == "private",
                "branches": {"main": {"sha": sha, "files": {".gitattributes": b"*.safetensors filter=lfs\n"}}},
            }
            return 200, {"url": url, "name": repo_id, "id": repo_id}
        if method == "GET" and parts == ["api", "agent-harnesses"]:  # huggingface_hub's agent detection
            return 200, {"standardEnvVars": [], "harnesses": {}}
        if method == "POST" and parts == ["api", "validate-yaml"]:  # a README's front matter, before a commit
            import yaml

            content = json.loads(body)["content"]
            try:
                if content.startswith("---\n"):
                    yaml.safe_load(content[4:content.index("\n---", 4)])
            except (yaml.YAMLError, ValueError) as exc:
                return 400, {"errors": [{"message": f"invalid YAML metadata: {exc}"}], "warnings": []}
            return 200, {"errors": [], "warnings": []}
        if len(parts) < 5 or parts[0] != "api" or parts[1] not in ("models", "datasets", "spaces"):
            return 404, None
        repo_type = parts[1][:-1]
        repo_id, action, rest = f"{parts[2]}/{parts[3]}", parts[4], parts[5:]
        repo = self._repo(repo_type, repo_id)
        if repo is None:
            return 404, {"error": "Repository not found"}
        branch_name = rest[0] if rest else "main"
        if method == "POST" and action == "branch" and rest:
            if branch_name in repo["branches"]:
                return 409, {"error": f"Reference already exists: refs/heads/{branch_name}"}
            src = repo["branches"]["main"]
            repo["branches"][branch_name] = {"sha": src["sha"], "files": dict(src["files"])}
            return 200, {}
        branch = repo["branches"].get(branch_name)
        if branch is None:
            return 404, {"error": f"Invalid rev id: {branch_name}"}
        if method == "GET" and action == "revision":
            return 200, {"id": repo_id, "sha": branch["sha"], "private": repo["private"],
                         "siblings": [{"rfilename": p} for p in sorted(branch["files"])]}
        if method == "GET" and action == "tree":
            entries, dirs = [], set()
            for path, data in sorted(branch["files"].items()):
                for i in range(1, path.count("/") + 1):
                    dirs.add(path.rsplit("/", path.count("/") - i + 1)[0])
                entries.append({"type": "file", "oid": _git_sha1(data), "size": len(data), "path": path})
            entries += [{"type": "directory", "oid": hashlib.sha1(d.encode()).hexdigest(), "size": 0, "path": d}
                        for d in sorted(dirs)]
            return 200, entries
        if method == "POST" and action == "preupload":
            files = json.loads(body)["files"]
            return 200, {"files": [{"path": f["path"], "uploadMode": "regular", "shouldIgnore": False,
                                    "oid": _git_sha1(branch["files"][f["path"]]) if f["path"] in branch["files"]
                                    else None} for f in files]}
        if method == "POST" and action == "commit":
            lines = [json.loads(line) for line in body.decode().splitlines() if line.strip()]
            header = lines[0]
            if header.get("key") != "header":
                return 400, {"error": "first line must be the header"}
            files = dict(branch["files"])
            for item in lines[1:]:
                key, value = item["key"], item["value"]
                if key == "file":
                    files[value["path"]] = base64.b64decode(value["content"])
                elif key == "deletedFile":
                    files.pop(value["path"], None)
                elif key == "deletedFolder":
                    prefix = value["path"].rstrip("/") + "/"
                    files = {p: d for p, d in files.items() if not p.startswith(prefix)}
                else:  # lfsFile etc.: never asked for (preupload says regular)
                    return 400, {"error": f"stand-in: unsupported commit operation {key!r}"}
            sha = hashlib.sha1(f"{branch['sha']}:{len(self.commits)}:{header['value']['summary']}".encode()).hexdigest()
            branch["files"], branch["sha"] = files, sha
            self.commits.append({"repo": (repo_type, repo_id), "branch": branch_name,
                                 "summary": header["value"]["summary"], "sha": sha})
            return 200, {"success": True, "commitOid": sha, "commitUrl": f"{self._url(repo_type, repo_id)}/commit/{sha}",
                         "hookOutput": "", "pullRequestUrl": None}
        return 404, None


@pytest.fixture
def hub(monkeypatch):
    """A running `HubStandIn`, with HF_ENDPOINT pointing to it and offline mode off for this test only."""
    from huggingface_hub import constants

    standin = HubStandIn().start()
    for var in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE", "HF_DATASETS_OFFLINE"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("HF_ENDPOINT", standin.endpoint)
    monkeypatch.setenv("HF_TOKEN", "hf_standin_secret_token")
    monkeypatch.setenv("HF_HUB_DISABLE_PROGRESS_BARS", "1")
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", False)
    monkeypatch.setattr(constants, "ENDPOINT", standin.endpoint)
    try:
        yield standin
    finally:
        standin.stop()
    assert not standin.unknown, f"requests the stand-in does not implement: {standin.unknown}"
