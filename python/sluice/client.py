"""Client for sluiced's JSON control socket (docs/api.md).

Newline-delimited JSON over a UNIX stream socket: one request object per line,
exactly one response object per line, in order.

    with Client("/run/sluice/ctl.sock") as c:
        print(c.call("status")["uptime_s"])
"""

import errno
import json
import os
import select
import socket

DEFAULT_SOCKET_DIR = "/run/sluice"
MAX_LINE = 64 * 1024 * 1024  # responses (stats with many NFs) may be large


class SluiceError(Exception):
    """Base for client errors; str() is a message fit for the user."""


class NotRunning(SluiceError):
    """Nothing is listening on the control socket."""


class ApiError(SluiceError):
    """sluiced answered {"ok": false, "error": ...}."""

    def __init__(self, error, response=None):
        self.error = error
        self.response = response or {}
        super().__init__(error)


def socket_dir_default():
    """$SLUICE_SOCKET_DIR or /run/sluice."""
    return os.environ.get("SLUICE_SOCKET_DIR") or DEFAULT_SOCKET_DIR


def ctl_path(socket_dir=None):
    return os.path.join(socket_dir or socket_dir_default(), "ctl.sock")


class Client:
    """A connection to sluiced's control socket. Connects lazily on first call.

    timeout: seconds for connecting and for each response."""

    def __init__(self, socket_path=None, timeout=5.0):
        self.path = socket_path or ctl_path()
        self.timeout = timeout
        self._sock = None
        self._buf = b""
        self.last_raw = None  # the last response line, exactly as received (str, no newline)

    # -- connection
    def connect(self):
        if self._sock is not None:
            return self
        if not os.path.exists(self.path):
            raise NotRunning(f"sluiced is not running (no socket at {self.path})")
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        s.settimeout(self.timeout)
        try:
            s.connect(self.path)
        except (ConnectionRefusedError, FileNotFoundError):
            s.close()
            raise NotRunning(f"sluiced is not running (nothing listening on {self.path})") from None
        except PermissionError:
            s.close()
            raise SluiceError(f"permission denied connecting to {self.path} (run as root or a member "
                              "of the socket's group)") from None
        except socket.timeout:
            s.close()
            raise SluiceError(f"timed out connecting to {self.path} after {self.timeout:g}s") from None
        except OSError as e:
            s.close()
            raise SluiceError(f"cannot connect to {self.path}: {e.strerror or e}") from None
        self._sock = s
        return self

    def close(self):
        if self._sock is not None:
            try:
                self._sock.close()
            finally:
                self._sock = None
                self._buf = b""

    def peer_closed(self):
        """Between requests: has sluiced closed the connection (it stopped, or died)? Never blocks."""
        if self._sock is None:
            return True
        p = select.poll()
        p.register(self._sock, select.POLLIN | select.POLLHUP)
        if not p.poll(0):
            return False  # nothing to read: still there
        try:  # readable between requests: only an end of file (sluiced sends nothing unasked)
            return self._sock.recv(1, socket.MSG_PEEK) == b""
        except OSError:
            return True

    def __enter__(self):
        return self.connect()

    def __exit__(self, *exc):
        self.close()

    # -- requests
    def request(self, obj):
        """Send one request object; return the response dict (ok true or false)."""
        self.connect()
        line = json.dumps(obj, separators=(",", ":")).encode() + b"\n"
        try:
            self._sock.sendall(line)
            raw = self._readline()
        except socket.timeout:
            self.close()
            raise SluiceError(f"sluiced did not answer {obj.get('cmd')!r} within {self.timeout:g}s") from None
        except OSError as e:
            self.close()
            if e.errno in (errno.EPIPE, errno.ECONNRESET):
                raise SluiceError(f"sluiced closed the control connection ({self.path})") from None
            raise SluiceError(f"control socket error: {e.strerror or e}") from None
        self.last_raw = raw
        try:
            resp = json.loads(raw)
        except ValueError:
            raise SluiceError(f"sluiced sent a response that is not JSON: {raw[:200]!r}") from None
        if not isinstance(resp, dict) or "ok" not in resp:
            raise SluiceError(f"sluiced sent a malformed response: {raw[:200]!r}")
        return resp

    def call(self, cmd, **fields):
        """Send {"cmd": cmd, **fields}; return the response, or raise ApiError
        when it is not ok."""
        req = {"cmd": cmd}
        req.update(fields)
        resp = self.request(req)
        if resp.get("ok") is not True:
            raise ApiError(str(resp.get("error", "unknown error")), resp)
        return resp

    def _readline(self):
        while b"\n" not in self._buf:
            chunk = self._sock.recv(65536)
            if not chunk:
                self.close()
                raise SluiceError("sluiced closed the control connection without answering")
            self._buf += chunk
            if len(self._buf) > MAX_LINE:
                self.close()
                raise SluiceError("sluiced response too long")
        line, _, self._buf = self._buf.partition(b"\n")
        return line.decode("utf-8", errors="replace")

    # -- conveniences (docs/api.md)
    def status(self):
        return self.call("status")

    def ports(self):
        return self.call("ports")["ports"]

    def nfs(self):
        return self.call("nfs")["nfs"]

    def chains(self):
        return self.call("chains")["chains"]

    def stats(self):
        return self.call("stats")

    def chain_set(self, name, nfs, exit=None):
        return self.call("chain_set", name=name, nfs=list(nfs), exit=exit)["chain"]

    def port_chain_set(self, port, chain):
        return self.call("port_chain_set", port=port, chain=chain)["port"]

    def port_add(self, name, vdev, chain=None, port_id=None, queues=None):
        fields = {"name": name, "vdev": vdev, "chain": chain}
        if port_id is not None:
            fields["id"] = port_id
        if queues is not None:
            fields["queues"] = queues
        return self.call("port_add", **fields)["port"]

    def port_del(self, name):
        return self.call("port_del", name=name)

    def rules(self):
        return self.call("rules")

    def rule_add(self, rule):
        return self.call("rule_add", rule=rule)["rule"]

    def rule_del(self, rule_id):
        return self.call("rule_del", id=rule_id)

    def rules_set(self, rules):
        return self.call("rules_set", rules=list(rules))

    def classify(self, port, frames):
        """frames: bytes objects -> [{malformed, rule, action}, ...]"""
        return self.call("classify", port=port, packets=[f.hex() for f in frames])["results"]

    def flows(self):
        return self.call("flows")["flows"]

    def service_set(self, name, policy):
        return self.call("service_set", name=name, policy=policy)

    def shutdown(self):
        return self.call("shutdown")
