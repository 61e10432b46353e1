"""sd_notify for `sluice up` under systemd (dist/sluice.service, Type=notify), without libsystemd.

The protocol (sd_notify(3)): one datagram of newline-separated KEY=VALUE lines on an AF_UNIX
SOCK_DGRAM socket whose address is in $NOTIFY_SOCKET; an address starting with '@' is in the abstract
namespace ('@' stands for the leading NUL byte). systemd learns the sender's pid from the socket's
credentials, so with NotifyAccess=main only the service's main process is heard.

    take_socket()          once, early in `sluice up`: remembers $NOTIFY_SOCKET and removes it from
                           os.environ, so that sluiced, the NFs and every other child started later
                           cannot speak for the service (sd_notify's unset_environment)
    notify(READY=1, STATUS="...")   sends READY=1\\nSTATUS=...\\n; True when a datagram was sent
    ready(status, forked)  READY=1 + STATUS=, and MAINPID= when systemd did not start this process

notify() never raises: without a socket (not under systemd) it does nothing and returns False, and a
send that fails (systemd gone, socket full) is logged once and otherwise ignored. What the supervisor
sends: READY=1 once sluiced answers and every NF is attached (with MAINPID= when the supervisor is not
the process systemd started: `sluice up -d`), STOPPING=1 when the teardown starts, and STATUS= lines
on the way (NF exits and restarts, sluiced's death). RELOADING=1 gets MONOTONIC_USEC= added (systemd
253's Type=notify-reload wants it; older ones ignore it): notify(RELOADING=1, STATUS="reloading ...")
before a reload, notify(READY=1, STATUS=...) after it.
"""

import os
import socket
import sys
import time

_UNSET = object()
_addr = _UNSET        # the address taken from $NOTIFY_SOCKET (None: there was none)
_warned = False


def _parse(value):
    """$NOTIFY_SOCKET's value -> an address for sendto (str path or abstract bytes), or None."""
    if not value:
        return None
    if value.startswith("@"):
        return b"\0" + value[1:].encode()
    if value.startswith("/"):
        return value
    return None  # e.g. vsock:CID:PORT (systemd 254+): not spoken here


def take_socket():
    """Remember $NOTIFY_SOCKET and remove it from os.environ. Returns the address (None when there is
    none). Later calls return what the first one found."""
    global _addr
    value = os.environ.pop("NOTIFY_SOCKET", None)
    if _addr is _UNSET:
        _addr = _parse(value)
    return _addr


def enabled():
    """True when `sluice up` runs with a notification socket (under systemd, Type=notify)."""
    return take_socket() is not None


def message(**fields):
    """The datagram for fields: notify(READY=1, STATUS="x") -> b"READY=1\\nSTATUS=x\\n". Newlines in a
    value would start a new field: they become spaces."""
    if "RELOADING" in fields and "MONOTONIC_USEC" not in fields:
        fields["MONOTONIC_USEC"] = time.clock_gettime_ns(time.CLOCK_MONOTONIC) // 1000
    lines = []
    for key, value in fields.items():
        if value is None:
            continue
        lines.append(f"{key}={str(value).replace(chr(10), ' ')}")
    return ("\n".join(lines) + "\n").encode() if lines else b""


def ready(status=None, forked=False):
    """READY=1 (and STATUS=status) from the supervisor once everything is up. MAINPID= is added when
    this process is not the one systemd started: forked (`sluice up -d`'s supervisor), or not the pid
    in $SYSTEMD_EXEC_PID (systemd 248+; e.g. a shell that did not exec); systemd then takes this
    process as the service's main one (which needs NotifyAccess=all)."""
    exec_pid = os.environ.get("SYSTEMD_EXEC_PID")
    mainpid = os.getpid() if forked or (exec_pid and exec_pid != str(os.getpid())) else None
    return notify(READY=1, STATUS=status, MAINPID=mainpid)


def notify(**fields):
    """Send fields (KEY=value, e.g. READY=1, STATUS="...", STOPPING=1, RELOADING=1, MAINPID=pid) to
    the service manager. True when sent; False without a socket or when sending failed. Never raises."""
    global _warned
    try:
        addr = take_socket()
        data = message(**fields)
        if addr is None or not data:
            return False
        with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM | socket.SOCK_CLOEXEC) as s:
            s.settimeout(1.0)
            s.sendto(data, addr)
        return True
    except Exception as e:  # noqa: BLE001 - a notification must never break the supervisor
        if not _warned:
            _warned = True
            try:
                print(f"sluice: warning: cannot notify the service manager ({e}); going on", file=sys.stderr,
                      flush=True)
            except Exception:  # noqa: BLE001
                pass
        return False
