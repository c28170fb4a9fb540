"""A real `numaplace serve` (SQLite in a temporary directory) with two
registered hosts, for the Nova classes to ask."""

import json
import os
import pathlib
import re
import subprocess
import time
import urllib.request

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[3]


def binary():
    path = os.environ.get("NUMAPLACE_BIN") or str(ROOT / "target" / "debug" / "numaplace")
    if not os.path.exists(path):
        pytest.fail("numaplace binary not found at %s (build it, or set NUMAPLACE_BIN)" % path)
    return path


class Server:
    def __init__(self, url):
        self.url = url

    def call(self, method, path, body=None, raw=None):
        data = raw if raw is not None else (None if body is None else json.dumps(body).encode())
        req = urllib.request.Request(self.url + path, data=data, method=method)
        if body is not None:
            req.add_header("Content-Type", "application/json")
        try:
            with urllib.request.urlopen(req, timeout=10) as r:
                text = r.read()
                return r.status, (json.loads(text) if text else None)
        except urllib.error.HTTPError as e:
            return e.code, json.loads(e.read() or b"null")


@pytest.fixture(scope="session")
def server(tmp_path_factory):
    d = tmp_path_factory.mktemp("serve")
    err = open(d / "stderr", "w+")
    proc = subprocess.Popen([binary(), "serve", "--db", "sqlite:%s" % (d / "db"), "--listen", "127.0.0.1:0"],
                            stderr=err, stdout=subprocess.DEVNULL)
    url = None
    for _ in range(200):
        err.seek(0)
        m = re.search(r"listening on (http://\S+)", err.read())
        if m:
            url = m.group(1)
            break
        if proc.poll() is not None:
            break
        time.sleep(0.05)
    if url is None:
        proc.kill()
        err.seek(0)
        pytest.fail("numaplace serve did not start: %s" % err.read())
    s = Server(url)
    topo = ROOT / "fixtures" / "topologies" / "mpibind"
    # A 2-socket, 8-node EPYC (48 cores, 96 threads) and a 2-socket Xeon
    # without SMT (36 cores, 36 threads): real hosts from LLNL's mpibind.
    for name, f in (("corona", "epyc-corona.xml"), ("quartz", "cts1-quartz-smt1.xml")):
        status, _ = s.call("PUT", "/v1/hosts/" + name, raw=(topo / f).read_bytes())
        assert status in (200, 201), status
    yield s
    proc.terminate()
    proc.wait(timeout=10)
