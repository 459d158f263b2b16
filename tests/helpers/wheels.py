"""Small wheels of the tests' own, written by hand (a zip with METADATA, WHEEL and RECORD): what a provision
installs when it is the mechanics under test, not TensorFlow (console/provision.py, agent/envs.py)."""

from __future__ import annotations

import base64
import hashlib
import importlib.metadata
import os
import zipfile
from pathlib import Path


def _record(data: bytes) -> str:
    digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
    return f"sha256={digest},{len(data)}"


def make_wheel(folder: Path, name: str, version: str, requires=(), payload: int = 0,
               tag: str = "py3-none-any", files: int = 0, extras=()) -> Path:
    """``folder/<name>-<version>-<tag>.whl``: a package ``name`` whose ``__version__`` is ``version``, needing
    ``requires`` (pip's words), with ``payload`` random bytes (stored: a big wheel is big on the wire too) and
    ``files`` small modules more (an install of many files takes its time, as TensorFlow's 24,000); ``extras``: the
    extras it provides (a requirement of ``requires`` says ``; extra == "and-cuda"`` for one)."""
    folder.mkdir(parents=True, exist_ok=True)
    module, extra = name.replace("-", "_"), files
    dist = f"{module}-{version}.dist-info"
    files = {
        f"{module}/__init__.py": f"__version__ = {version!r}\n".encode(),
        f"{dist}/METADATA": (f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n"
                             + "".join(f"Provides-Extra: {e}\n" for e in extras)
                             + "".join(f"Requires-Dist: {r}\n" for r in requires)).encode(),
        f"{dist}/WHEEL": (f"Wheel-Version: 1.0\nGenerator: tfcc-tests\nRoot-Is-Purelib: "
                          f"{'true' if tag.endswith('any') else 'false'}\nTag: {tag}\n").encode(),
    }
    if payload:
        files[f"{module}/payload.bin"] = os.urandom(payload)
    for number in range(extra):
        files[f"{module}/part{number // 1000}/m{number}.py"] = f"N = {number}\n".encode() * 20
    path = folder / f"{module}-{version}-{tag}.whl"
    with zipfile.ZipFile(path, "w", zipfile.ZIP_STORED) as z:
        lines = []
        for rel, data in files.items():
            z.writestr(rel, data)
            lines.append(f"{rel},{_record(data)}")
        lines.append(f"{dist}/RECORD,,")
        z.writestr(f"{dist}/RECORD", "\n".join(lines) + "\n")
    return path


def console_stack_stand_ins(folder: Path) -> list[Path]:
    """A tiny wheel for each package of the console's TensorFlow stack, at the console's own versions (what tfcc's
    default environment pins): a provision's whole way with no download and no 600 MB."""
    from console.environments import CONSOLE_STACK

    return [make_wheel(folder, name, importlib.metadata.version(name)) for name in CONSOLE_STACK]


class Index:
    """A package index (PEP 503's simple pages) of ``folder``'s wheels at ``http://127.0.0.1:<port>/simple/``,
    served on a thread while the ``with`` lasts: an index this machine reaches and the test hosts do not."""

    def __init__(self, folder: Path):
        import http.server
        import threading

        self.folder = Path(folder)
        self.hits: list[str] = []
        index = self

        class Pages(http.server.BaseHTTPRequestHandler):
            def do_HEAD(self):  # noqa: N802 (http.server's name)
                self._answer(body=False)

            def do_GET(self):  # noqa: N802
                self._answer(body=True)

            def _answer(self, body: bool) -> None:
                index.hits.append(self.path)
                data, kind = index.page(self.path.split("?")[0])
                if data is None:
                    self.send_error(404)
                    return
                self.send_response(200)
                self.send_header("Content-Type", kind)
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                if body:
                    self.wfile.write(data)

            def log_message(self, *args):
                pass

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Pages)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/simple/"
        self._thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def page(self, path: str):
        wheels = sorted(self.folder.glob("*.whl"))
        projects: dict = {}
        for wheel in wheels:
            projects.setdefault(wheel.name.split("-")[0].replace("_", "-").lower(), []).append(wheel)
        parts = [p for p in path.split("/") if p]
        if parts == ["simple"]:
            links = "".join(f'<a href="{name}/">{name}</a>\n' for name in projects)
            return f"<html><body>{links}</body></html>".encode(), "text/html"
        if len(parts) == 2 and parts[0] == "simple" and parts[1].replace("_", "-").lower() in projects:
            links = "".join(f'<a href="../../files/{w.name}#sha256={hashlib.sha256(w.read_bytes()).hexdigest()}">'
                            f"{w.name}</a>\n" for w in projects[parts[1].replace("_", "-").lower()])
            return f"<html><body>{links}</body></html>".encode(), "text/html"
        if len(parts) == 2 and parts[0] == "files" and (self.folder / parts[1]).is_file():
            return (self.folder / parts[1]).read_bytes(), "application/octet-stream"
        return None, ""

    def __enter__(self) -> "Index":
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.server.shutdown()
        self.server.server_close()
