"""Sandboxed NF processes: `nfs[].sandbox: strict` (docs/abi.md "Sandbox").

The supervisor starts a strict NF like any other, and in the child, between fork and exec
(child_setup, run as Popen's preexec_fn), as root still:

1. connects to sluiced's nf.sock and puts the connected socket on the fd number the NF is told in
   SLUICE_NF_FD (the NF's own uid could not reach the socket; sluiced's SO_PEERCRED check sees
   root and the NF's pid, which exec keeps);
2. moves into a new, empty network namespace (only a loopback device, down) and a new IPC
   namespace (no System V or POSIX message queue objects of others);
3. drops every group and takes the NF's own uid and gid (UidPool: UID_BASE + a number that no
   running process uses; no passwd entry needed);
4. sets no_new_privs (no setuid binary or file capability gives anything back) and, again, the
   parent-death signal (a change of uid clears it).

Popen then closes every other fd (stdin is /dev/null, stdout and stderr the NF's log) and execs the
NF. The SDK attaches over the inherited socket and, told by SLUICE_NF_SANDBOX=strict, installs its
seccomp filter before the run loop; a refused system call ends the NF with EXIT_STATUS (or SIGSYS),
which death_note() explains in the supervisor's log line.
"""

import ctypes
import os
import signal
import socket

UID_BASE = 2_000_000_000    # strict NFs run as UID_BASE + n (gid the same), n in 0..UID_COUNT-1
UID_COUNT = 1_000_000
EXIT_STATUS = 159           # SL_SANDBOX_EXIT: the SDK's SIGSYS handler (128 + SIGSYS)
SETUP_FAILED = 125          # the child could not set the sandbox up; it never ran the NF

_CLONE_NEWNET = 0x40000000
_CLONE_NEWIPC = 0x08000000
_PR_SET_PDEATHSIG = 1
_PR_SET_NO_NEW_PRIVS = 38

_libc = None


def _load_libc():
    """libc through ctypes, loaded in the parent (no dlopen between fork and exec)."""
    global _libc
    if _libc is None:
        _libc = ctypes.CDLL(None, use_errno=True)
    return _libc


def _uids_in_use():
    """Real, effective, saved and filesystem uids and gids of every process, in our range."""
    used = set()
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        try:
            with open(f"/proc/{d}/status", "rb") as f:
                for line in f:
                    if line.startswith((b"Uid:", b"Gid:")):
                        used.update(int(x) for x in line.split()[1:])
        except (OSError, ValueError):
            continue
    return {u for u in used if UID_BASE <= u < UID_BASE + UID_COUNT}


class UidPool:
    """The uids of one supervisor's strict NFs: one per instance, kept across its restarts."""

    def __init__(self):
        self.mine = {}   # instance name -> uid

    def take(self, name):
        if name in self.mine:
            return self.mine[name]
        taken = _uids_in_use() | set(self.mine.values())
        for uid in range(UID_BASE, UID_BASE + UID_COUNT):
            if uid not in taken:
                self.mine[name] = uid
                return uid
        raise OSError(f"no free sandbox uid in {UID_BASE}..{UID_BASE + UID_COUNT - 1}")

    def release(self, name):
        self.mine.pop(name, None)


def check_privileges():
    """None when strict NFs can be started, else why not."""
    if os.geteuid() != 0:
        return ("needs `sluice up` to run as root (a strict NF gets its own uid and network "
                "namespace)")
    return None


def child_setup(nf_sock, fd, uid):
    """The preexec_fn of a strict NF: see the module's docstring. `fd` is a placeholder the parent
    holds open and lists in pass_fds, so the connected socket replaces it and survives close_fds.
    Any failure ends the child with SETUP_FAILED and a line in the NF's log: it never runs the NF
    unconfined."""
    libc = _load_libc()

    def step(what, rc):
        if rc != 0:
            e = ctypes.get_errno()
            raise OSError(e, f"{what}: {os.strerror(e)}")

    def setup():
        try:
            s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            try:
                s.connect(nf_sock)
            except OSError as e:
                raise OSError(e.errno, f"connect to {nf_sock}: {e.strerror}") from None
            os.dup2(s.fileno(), fd, inheritable=True)
            s.close()
            step("unshare(CLONE_NEWNET | CLONE_NEWIPC)", libc.unshare(_CLONE_NEWNET | _CLONE_NEWIPC))
            os.setgroups([])
            os.setresgid(uid, uid, uid)
            os.setresuid(uid, uid, uid)
            step("prctl(PR_SET_NO_NEW_PRIVS)", libc.prctl(_PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0))
            libc.prctl(_PR_SET_PDEATHSIG, signal.SIGTERM, 0, 0, 0)
            if os.getresuid() != (uid, uid, uid) or os.getgroups():
                raise OSError(0, "the uid or groups did not change")
        except BaseException as e:  # noqa: BLE001 - anything: do not exec
            msg = e.strerror if isinstance(e, OSError) and e.strerror else repr(e)
            try:
                os.write(2, f"sluice: sandbox: cannot set up the sandbox (sandbox: strict): {msg}\n".encode())
            finally:
                os._exit(SETUP_FAILED)
    return setup


def death_note(rc):
    """What an NF's exit status says about the sandbox ('' when nothing)."""
    if rc == EXIT_STATUS or rc == -signal.SIGSYS:
        return " (sandbox: strict refused a system call; the allowed set is in docs/abi.md)"
    if rc == SETUP_FAILED:
        return " (the sandbox could not be set up; see the NF's log)"
    return ""
