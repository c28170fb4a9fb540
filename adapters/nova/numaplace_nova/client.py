"""A small client of numaplace serve's API (standard library only)."""

import json
import urllib.error
import urllib.request


class ServiceError(Exception):
    """The service could not be asked, or answered an error."""

    def __init__(self, message, status=None, code=None):
        super().__init__(message)
        self.status = status
        self.code = code


class Client:
    def __init__(self, url, timeout=2.0, token=None):
        self.url = url.rstrip("/")
        self.timeout = timeout
        self.token = token

    def _call(self, method, path, body=None, key=None):
        data = None if body is None else json.dumps(body).encode()
        req = urllib.request.Request(self.url + path, data=data, method=method)
        if key:
            req.add_header("Idempotency-Key", key)
        if data is not None:
            req.add_header("Content-Type", "application/json")
        if self.token:
            req.add_header("Authorization", "Bearer " + self.token)
        try:
            with urllib.request.urlopen(req, timeout=self.timeout) as resp:
                text = resp.read()
                return json.loads(text) if text else None
        except urllib.error.HTTPError as e:
            try:
                err = json.loads(e.read()).get("error", {})
            except ValueError:
                err = {}
            raise ServiceError("numaplace %s %s: %s %s" % (
                method, path, e.code, err.get("message", e.reason)),
                status=e.code, code=err.get("code")) from None
        except (urllib.error.URLError, OSError, ValueError) as e:
            raise ServiceError("numaplace %s %s: %s" % (method, path, e)) from None

    def evaluate(self, vm, hosts):
        """Each host's verdict on the VM request ``vm``, in order."""
        return self._call("POST", "/v1/evaluate", {"vm": vm, "hosts": hosts})["hosts"]

    def claim(self, vm, host, key=None):
        """Places ``vm`` on ``host`` (and only there); the placement. With
        ``key`` (an Idempotency-Key), a retry gets the first answer."""
        body = dict(vm)
        body["constraints"] = {"hosts": [host]}
        return self._call("POST", "/v1/placements", body, key=key)

    def release(self, name, key=None):
        """Deletes the placement of VM ``name``; False when there was none."""
        try:
            self._call("DELETE", "/v1/placements/" + urllib.request.quote(name, safe=""), key=key)
            return True
        except ServiceError as e:
            if e.status == 404:
                return False
            raise

    def placement(self, name):
        try:
            return self._call("GET", "/v1/placements/" + urllib.request.quote(name, safe=""))
        except ServiceError as e:
            if e.status == 404:
                return None
            raise
