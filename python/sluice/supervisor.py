"""Start sluiced and the configured NFs, keep the NFs running, tear everything down.

`sluice up` builds a Supervisor from a validated config and calls run(); `sluice
down` calls stop_running(). State for `down` lives in <socket_dir>/state.json:

    {"supervisor": {"pid", "starttime"}, "sluiced": {"pid", "starttime", "binary"},
     "socket_dir", "config", "started_at", "updated_at",
     "nfs": [{"name", "service", "sandbox", "uid", "pid", "starttime", "state", "restarts", "log"}]}

NF groups (docs/groups.md; the config's `groups:` / `nfs[].group`): group instance k is one sluice-group
process, slot "<group>.<k>", hosting instance k of every member (each attaches to sluiced as an NF of its
own); its entry in "nfs" has "kind": "group", "group", "members" (instance names) and "services", and
the members have no entry of their own. Restarts, backoff and cpus are per process: a death restarts
the whole group. logs/<member>.log links to the group's log; a member cannot be scaled or removed alone.

With a `stack:` section in the config, "nfs" also holds the socket service sluice-stackd (docs/sockets.md,
"kind": "stack"): started once the NFs are attached, in the same socket dir, restarted like an NF
(restart: always) and stopped with them. With `metrics:`, the Prometheus exporter (`sluice metrics --listen`,
docs/observability.md, "kind": "exporter") likewise, and with `web:` the web view (`sluice web --listen`,
"kind": "web").

While it runs, the supervisor answers newline-delimited JSON on <socket_dir>/supervisor.sock
(the same framing as sluiced's control socket), for `sluice nf scale`:

    {"cmd": "nfs"}                                  -> {"ok", "nfs": [slot...], "removed": [...]}
    {"cmd": "restart"}                              -> {"ok", "pid", "old_pid", "seconds"}
    {"cmd": "reload", "path": FILE, "dry_run": B}   -> {"ok", "plan": {"steps", "refused"}, "applied": [...],
                                                        "dry_run"}  (python/sluice/reload.py)
    {"cmd": "scale", "service": S, "instances": N,  -> {"ok", "service", "instances",
     "drain_timeout": seconds (optional)}               "start": [names], "drain": [names],
                                                        "removed_after": seq}

`removed` lists finished removals {"seq", "name", "service", "result", "held"}; the ones of a scale
request have seq > its removed_after. result: drained, drain timeout, exited while draining, not
running.

sluiced restarts (docs/architecture.md "Restarts"): when sluiced dies, or on `restart` (sluice restart:
sluiced's `shutdown` with restart true, which first lets the NFs hand back what they hold), the
supervisor starts a new sluiced with the same config.json, sockets and tokens, and `--resume
runtime.json` (the chains, rules, services and ports sluiced says were changed at runtime); the NFs
keep running and attach again by themselves (SLUICE_NF_REATTACH_MS). A sluiced that dies
SLUICED_RESTARTS_MAX times within SLUICED_RESTART_WINDOW seconds is not restarted again: everything stops.

Scaling down drains a replica (sluiced's `nf_drain`: no new packets, what it holds comes back)
and stops it only once it holds nothing (`queued` and `lent` 0), or when drain_timeout expires.
"""

import ctypes
import glob
import json
import os
import select
import socket
import shutil
import signal
import subprocess
import sys
import time

from .cgroups import CgroupError, CpuWeights

from . import config as sconfig
from . import guests
from . import notify
from . import reload as sreload
from . import sandbox
from .client import Client, SluiceError

BACKOFF_MIN = 0.1        # first restart delay (s)
BACKOFF_MAX = 5.0        # cap (s)
BACKOFF_RESET = 10.0     # uptime after which the delay goes back to BACKOFF_MIN (s)
NF_STOP_GRACE = 3.0      # SIGTERM -> SIGKILL for NFs (s)
SLUICED_STOP_GRACE = 5.0  # shutdown request -> SIGKILL for sluiced (s)
POLL = 0.1
DRAIN_TIMEOUT = 10.0     # default limit for a replica to hand back what it holds (s)
MAX_INSTANCES = 1024     # replicas per service (sluiced's SL_MAX_INSTANCES)
REMOVED_KEEP = 64        # finished removals remembered for `nfs` (the CLI's progress)
REATTACH_MS = 30000      # an NF waits this long for a restarted sluiced before it gives up (SDK)
SLUICED_RESTARTS_MAX = 5  # sluiced deaths within SLUICED_RESTART_WINDOW before the supervisor gives up
SLUICED_RESTART_WINDOW = 60.0

_PR_SET_PDEATHSIG = 1


class SupervisorError(Exception):
    """Startup or teardown failed; str() is a message for the user."""


# ------------------------------------------------------------------ helpers

def log(msg):
    ts = time.strftime("%Y-%m-%d %H:%M:%S")
    print(f"{ts} sluice: {msg}", file=sys.stderr, flush=True)


def proc_starttime(pid):
    """Kernel start time of pid (clock ticks since boot), or None if it is gone
    or a zombie. Guards against signalling a recycled pid."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            data = f.read().decode(errors="replace")
    except OSError:
        return None
    rest = data[data.rfind(")") + 2:].split()
    if not rest or rest[0] in ("Z", "X"):
        return None
    try:
        return int(rest[19])
    except (IndexError, ValueError):
        return None


def pid_alive(pid, starttime=None):
    if not pid:
        return False
    st = proc_starttime(pid)
    if st is None:
        return False
    return starttime is None or st == starttime


def tail(path, lines=20, offset=0):
    """Last `lines` lines of a file from byte offset on ('' when unreadable)."""
    try:
        with open(path, "rb") as f:
            f.seek(offset)
            data = f.read()
    except OSError:
        return ""
    text = data.decode(errors="replace").rstrip("\n")
    return "\n".join(text.splitlines()[-lines:])


def _indent(text, prefix="    "):
    return "\n".join(prefix + line for line in text.splitlines())


def _child_setup():
    """In the child before exec: die with the supervisor (SIGTERM)."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(_PR_SET_PDEATHSIG, signal.SIGTERM, 0, 0, 0)
    except Exception:  # noqa: BLE001 - best effort
        pass


def describe_status(rc):
    if rc is None:
        return "running"
    if rc < 0:
        try:
            return f"killed by {signal.Signals(-rc).name}"
        except ValueError:
            return f"killed by signal {-rc}"
    return f"exited with status {rc}"


def _wait_or_kill(p, grace, what):
    """Wait `grace` seconds for Popen p to exit (after a stop request), then SIGKILL it."""
    try:
        p.wait(grace)
    except subprocess.TimeoutExpired:
        log(f"{what} (pid {p.pid}) still running {grace:g}s after being asked to stop; killing it")
        p.kill()
        p.wait()


def supervisor_socket_path(socket_dir):
    return os.path.join(socket_dir, "supervisor.sock")


def state_path(socket_dir):
    return os.path.join(socket_dir, "state.json")


def read_state(socket_dir):
    try:
        with open(state_path(socket_dir)) as f:
            return json.load(f)
    except (OSError, ValueError):
        return None


def _write_json_atomic(path, obj):
    tmp = f"{path}.tmp.{os.getpid()}"
    with open(tmp, "w") as f:
        json.dump(obj, f, indent=2)
        f.write("\n")
    os.replace(tmp, path)


# ---------------------------------------------------------- binary discovery

def _repo_build_dir():
    here = os.path.dirname(os.path.abspath(__file__))
    cand = os.path.normpath(os.path.join(here, "..", "..", "build"))
    return cand if os.path.isfile(os.path.join(cand, "src", "manager", "sluiced")) else None


def find_binaries(cfg, build_dir=None):
    """Return (sluiced path, {builtin name: path}) for a normalized config.

    Order: build_dir (--build-dir), $SLUICE_BUILD_DIR, PATH, then the repo's
    own build/ next to this package. Raises SupervisorError."""
    explicit = build_dir or os.environ.get("SLUICE_BUILD_DIR")
    bdir = None
    if explicit:
        bdir = os.path.abspath(explicit)
        sluiced = os.path.join(bdir, "src", "manager", "sluiced")
        if not os.access(sluiced, os.X_OK):
            src = "--build-dir" if build_dir else "SLUICE_BUILD_DIR"
            raise SupervisorError(f"no sluiced binary at {sluiced} ({src}={explicit}); run `make build`")
    else:
        sluiced = shutil.which("sluiced")
        if sluiced:
            sluiced = os.path.abspath(sluiced)
            parent = os.path.dirname(sluiced)
            if parent.endswith(os.path.join("src", "manager")):
                bdir = os.path.dirname(os.path.dirname(parent))
        else:
            bdir = _repo_build_dir()
            if not bdir:
                raise SupervisorError("cannot find sluiced: pass --build-dir DIR (the meson build directory), "
                                      "set SLUICE_BUILD_DIR, or put sluiced on PATH (run `make build` first)")
            sluiced = os.path.join(bdir, "src", "manager", "sluiced")
    builtins = {}
    for nf in cfg["nfs"]:
        prog = nf["program"]
        if prog not in sconfig.BUILTIN_NFS or prog in builtins:
            continue
        exe = f"sluice-nf-{prog}"
        path = os.path.join(bdir, "nfs", exe) if bdir else None
        if not (path and os.access(path, os.X_OK)):
            path = shutil.which(exe)
        if not path:
            where = f"{bdir}/nfs" if bdir else "PATH"
            raise SupervisorError(f"cannot find built-in NF {exe} (looked in {where}); run `make build`")
        builtins[prog] = os.path.abspath(path)
    return sluiced, builtins


# NF groups (docs/groups.md): sluice-group and the plugin form of the built-ins, relative to a meson build
# directory; installed, sluice-group is beside sluice-nf-* and the plugins in <prefix>/<libdir>/sluice/nfs
GROUP_BIN = os.path.join("src", "group", "sluice-group")


def _plugin_dirs_near(group_bin):
    """Where the plugins of the sluice-group at group_bin are: the build tree's nfs/ (it is
    <build>/src/group/sluice-group), or an installation's <prefix>/lib*/[<multiarch>/]sluice/nfs."""
    d = os.path.dirname(os.path.realpath(group_bin))
    cands = [os.path.join(d, "..", "..", "nfs")]
    prefix = os.path.dirname(d)
    cands += sorted(glob.glob(os.path.join(prefix, "lib*", "sluice", "nfs")))
    cands += sorted(glob.glob(os.path.join(prefix, "lib*", "*", "sluice", "nfs")))
    return [os.path.normpath(c) for c in cands]


def find_group_files(cfg, build_dir=None, sluiced=None, builtins=None):
    """(sluice-group path, plugin directory) for a normalized config with groups, (None, None) without.

    sluice-group: build_dir (--build-dir) or $SLUICE_BUILD_DIR, else the build tree sluiced came from,
    else beside the built-in NFs found (an installation's bin/), PATH, the repo's own build/. Plugins:
    $SLUICE_PLUGIN_DIR, else the build tree's nfs/, else the installation's lib*/.../sluice/nfs; each
    member's sluice-nf-<program>.so must be there. Raises SupervisorError."""
    if not cfg.get("groups"):
        return None, None
    explicit = build_dir or os.environ.get("SLUICE_BUILD_DIR")
    cands = []
    if explicit:
        cands.append(os.path.join(os.path.abspath(explicit), GROUP_BIN))
    else:
        if sluiced and os.path.dirname(sluiced).endswith(os.path.join("src", "manager")):
            cands.append(os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(sluiced))), GROUP_BIN))
        cands += [os.path.join(os.path.dirname(p), "sluice-group") for p in (builtins or {}).values()]
        which = shutil.which("sluice-group")
        if which:
            cands.append(which)
        here = os.path.dirname(os.path.abspath(__file__))
        cands.append(os.path.join(here, "..", "..", "build", GROUP_BIN))
    group_bin = next((os.path.normpath(os.path.abspath(c)) for c in cands if os.access(c, os.X_OK)), None)
    if group_bin is None:
        where = cands[0] if explicit else "the build tree, beside the NFs, or on PATH"
        raise SupervisorError(f"cannot find sluice-group for the groups (looked in {where}); run `make build`")
    progs = sorted({nf["program"] for g in cfg["groups"] for nf in cfg["nfs"] if nf["name"] in g["nfs"]})
    env_dir = os.environ.get("SLUICE_PLUGIN_DIR")
    dirs = [env_dir] if env_dir else []
    if explicit:
        dirs.append(os.path.join(os.path.abspath(explicit), "nfs"))
    dirs += _plugin_dirs_near(group_bin)
    for d in dirs:
        if all(os.path.isfile(os.path.join(d, f"sluice-nf-{p}.so")) for p in progs):
            return group_bin, os.path.normpath(os.path.abspath(d))
    have = next((d for d in dirs if os.path.isdir(d)), dirs[0] if dirs else "?")
    missing = [f"sluice-nf-{p}.so" for p in progs if not os.path.isfile(os.path.join(have, f"sluice-nf-{p}.so"))]
    raise SupervisorError(f"cannot find the plugin form of {', '.join(missing)} for the groups (looked in "
                          f"{', '.join(dirs)}); run `make build`")


# the socket service's files (docs/sockets.md), relative to a meson build directory
STACK_FILES = {"sluice-stackd": os.path.join("src", "stack", "sluice-stackd"),
               "libsluice-sock.so": os.path.join("src", "sock", "libsluice-sock.so")}


def find_stack_file(name, build_dir=None, near=None):
    """Path of sluice-stackd or libsluice-sock.so (STACK_FILES), found as sluiced is: build_dir
    (--build-dir), $SLUICE_BUILD_DIR, then `near` (the build tree sluiced came from), PATH
    (sluice-stackd; the library beside it: the build tree's src/sock/, or an installation's lib
    directories), and the repo's own build/. Raises SupervisorError."""
    rel = STACK_FILES[name]
    explicit = build_dir or os.environ.get("SLUICE_BUILD_DIR")
    if explicit:
        path = os.path.join(os.path.abspath(explicit), rel)
        if os.path.isfile(path):
            return path
        src = "--build-dir" if build_dir else "SLUICE_BUILD_DIR"
        raise SupervisorError(f"no {name} at {path} ({src}={explicit}); run `make build`")
    cands = [os.path.join(near, rel)] if near else []
    stackd = shutil.which("sluice-stackd")
    if stackd:
        if name == "sluice-stackd":
            cands.append(stackd)
        else:
            d = os.path.dirname(os.path.realpath(stackd))
            cands.append(os.path.join(d, "..", "sock", name))
            cands += sorted(glob.glob(os.path.join(d, "..", "lib*", name)))
            cands += sorted(glob.glob(os.path.join(d, "..", "lib*", "*", name)))
    here = os.path.dirname(os.path.abspath(__file__))
    cands.append(os.path.join(here, "..", "..", "build", rel))
    for c in cands:
        if os.path.isfile(c):
            return os.path.normpath(os.path.abspath(c))
    raise SupervisorError(f"cannot find {name}: pass --build-dir DIR (the meson build directory), set "
                          "SLUICE_BUILD_DIR, or put sluice-stackd on PATH (run `make build` first)")


def stack_paths(socket_dir):
    """The socket service's two sockets in socket_dir: (stack.sock, stack-ctl.sock)."""
    return os.path.join(socket_dir, "stack.sock"), os.path.join(socket_dir, "stack-ctl.sock")


def stack_argv(stackd, socket_dir, stack):
    """sluice-stackd's command line for the config's normalized `stack:` options."""
    argv = [stackd, "--socket-dir", socket_dir, "--ring-kb", str(stack["ring_kb"]), "--slots", str(stack["slots"]),
            "--poll-us", str(stack.get("poll_us", 0)), *([] if stack.get("direct", True) else ["--no-direct"])]
    u = stack.get("user")
    if u:  # the user module (docs/sockets.md "The user module"): attaches to sluiced as u["service"]
        argv += ["--user-service", u["service"], "--user-mtu", str(u["mtu"]), "--user-supply", str(u["supply"]),
                 "--nf-socket", os.path.join(socket_dir, "nf.sock")]
        for a in u["addresses"]:
            argv += ["--user-addr", a]
        if u.get("gateway"):
            argv += ["--user-gateway", u["gateway"]]
        if u.get("mac"):
            argv += ["--user-mac", u["mac"]]
    return argv


def nf_program(nf, builtins):
    if nf["program"] in sconfig.BUILTIN_NFS:
        return builtins[nf["program"]]
    return nf.get("program_path") or nf["program"]


# ------------------------------------------------------------------ NF slot

class NfSlot:
    """One NF instance the supervisor keeps running."""

    def __init__(self, name, nf, argv, env, log_path, uid=None, nf_sock=None):
        self.name = name
        self.service = nf["name"]
        self.cpu_weight = nf.get("cpu_weight")
        self.cpus = nf.get("cpus")  # CPUs it may run on (nfs[].cpus); None: any
        self.policy = nf["restart"]
        self.sandbox = nf.get("sandbox", sconfig.default_sandbox(nf))
        self.start_error = None  # why the last start failed before the program ran (exec)
        self.uid = uid           # strict: the NF's own uid (and gid); None: runs as we do
        self.nf_sock = nf_sock   # strict: the supervisor connects it for the NF
        self.argv = argv
        self.env = env
        self.log_path = log_path
        self.proc = None
        self.starttime = None
        self.started_at = 0.0
        self.restarts = 0
        self.backoff = BACKOFF_MIN
        self.next_start = None
        self.last_rc = None
        self.state = "new"   # new | running | backoff | exited | stopped | draining
        self.drain_deadline = None
        self.held = None     # last (queued, lent) seen while draining
        self.label = f"NF {name}"  # how logs and errors name it

    def nf_names(self):
        """The NF instances this process attaches to sluiced (a group's: every member)."""
        return [self.name]

    def _pinned(self, setup):
        """setup, then the NF's CPUs (before exec, so sluiced sees them when it attaches:
        sluiced.nf_sched fifo needs NFs off the worker cores)."""
        if self.cpus is None:
            return setup

        def child():
            setup()
            os.sched_setaffinity(0, self.cpus)
        return child

    def start(self):
        with open(self.log_path, "ab") as lf:
            how = f" (sandbox strict, uid {self.uid})" if self.sandbox == "strict" else ""
            lf.write(f"--- {time.strftime('%Y-%m-%d %H:%M:%S')} sluice: starting {self.name}{how}: "
                     f"{' '.join(self.argv)}\n".encode())
            lf.flush()
            # Its own process group (a terminal's Ctrl-C is the supervisor's to handle), but not
            # its own session: with sched_autogroup every session is a scheduling group, and
            # thousands of one-task groups made the scheduler several times slower per wake-up.
            if self.sandbox == "strict":
                self._start_strict(lf)
            else:
                self.proc = subprocess.Popen(self.argv, env=self.env, stdin=subprocess.DEVNULL, stdout=lf,
                                             stderr=subprocess.STDOUT, process_group=0,
                                             preexec_fn=self._pinned(_child_setup), close_fds=True)
        self.starttime = proc_starttime(self.proc.pid)
        self.started_at = time.monotonic()
        self.next_start = None
        self.state = "running"

    def _start_strict(self, lf):
        """sandbox: strict (python/sluice/sandbox.py): the child connects nf.sock onto a placeholder fd
        we keep open and pass, then drops into the sandbox; the NF attaches over that fd."""
        placeholder = os.open(os.devnull, os.O_RDONLY | os.O_CLOEXEC)
        try:
            env = dict(self.env, SLUICE_NF_FD=str(placeholder), SLUICE_NF_SANDBOX="strict")
            self.proc = subprocess.Popen(self.argv, env=env, stdin=subprocess.DEVNULL, stdout=lf,
                                         stderr=subprocess.STDOUT, process_group=0, pass_fds=(placeholder,),
                                         preexec_fn=self._pinned(sandbox.child_setup(self.nf_sock, placeholder,
                                                                                    self.uid)),
                                         close_fds=True)
        finally:
            os.close(placeholder)

    def describe(self, rc):
        """describe_status(rc), and what it means for a sandboxed NF."""
        if rc is None and self.start_error:
            return f"could not be started ({self.start_error})"
        return describe_status(rc) + (sandbox.death_note(rc) if self.sandbox == "strict" else "")

    def to_state(self):
        return {"name": self.name, "service": self.service, "sandbox": self.sandbox, "uid": self.uid,
                "pid": self.proc.pid if self.proc and self.proc.returncode is None else None,
                "starttime": self.starttime if self.proc and self.proc.returncode is None else None,
                "state": self.state, "restarts": self.restarts, "last_status": self.last_rc,
                "log": self.log_path, "held": self.held}


class GuestSlot(NfSlot):
    """An NF in a KVM guest (docs/guests.md): the process supervised is its QEMU, started after sluiced
    prepared the guest's memory and channel; the guest powers off when the NF exits, so QEMU's exit
    status is the NF's (restarts as for a process)."""

    def __init__(self, name, nf, guest_argv, guest_env, log_path, ctl, kernel, initrd):
        super().__init__(name, nf, [guests.qemu_binary()], {}, log_path)
        self.vm = nf["vm"]
        self.guest_argv = guest_argv
        self.guest_env = guest_env
        self.ctl = ctl
        self.kernel, self.initrd = kernel, initrd

    def start(self):
        try:
            with Client(self.ctl, timeout=5.0) as c:
                prep = c.call("guest_prepare", name=self.name, service=self.service)
        except SluiceError as e:
            raise OSError(f"sluiced guest_prepare: {e}") from None
        initrd = guests.guest_initrd(self.initrd, self.guest_argv, self.log_path + ".initrd")
        self.argv = guests.qemu_argv(prep, self.vm, self.kernel, initrd, self.guest_argv, self.guest_env,
                                     self.name)
        self.spawn_qemu(f"starting {self.name} in a KVM guest ({self.vm['memory']} MiB, {self.vm['vcpus']} vCPU): "
                        f"{' '.join(self.guest_argv)}")

    def spawn_qemu(self, what):
        """Start self.argv (a QEMU) with its console in the log, headed by `what`."""
        with open(self.log_path, "ab") as lf:
            lf.write(f"--- {time.strftime('%Y-%m-%d %H:%M:%S')} sluice: {what}\n".encode())
            lf.flush()
            self.proc = subprocess.Popen(self.argv, stdin=subprocess.DEVNULL, stdout=lf, stderr=subprocess.STDOUT,
                                         process_group=0, preexec_fn=_child_setup, close_fds=True)
        self.starttime = proc_starttime(self.proc.pid)
        self.started_at = time.monotonic()
        self.next_start = None
        self.state = "running"

    def describe(self, rc):
        if rc is None and self.start_error:
            return f"could not be started ({self.start_error})"
        return "(its QEMU) " + describe_status(rc)

    def to_state(self):
        st = super().to_state()
        st["vm"] = dict(self.vm)
        return st


class VmGuestSlot(GuestSlot):
    """An ordinary guest (top-level `guests:`, docs/guests.md): a VM whose only NIC is a virtio-net
    device on a net_vhost port of sluiced. It attaches no NF; the supervisor runs its QEMU like an NF
    process (restart policy, log, stopped at `sluice down`), started once sluiced and the NFs are up."""

    def __init__(self, guest, socket_path, kernel, initrd, log_path):
        nf = {"name": None, "restart": guest["restart"]}  # no service: `nf scale` never counts it
        NfSlot.__init__(self, guest["name"], nf, guests.vhost_user_qemu_argv(guest, kernel, initrd, socket_path),
                        None, log_path)
        self.sandbox = "none"
        self.guest = guest
        self.socket_path = socket_path

    def nf_names(self):
        return []

    def start(self):
        self.spawn_qemu(f"starting guest {self.name} on port {self.guest['port']} ({self.socket_path}): "
                        f"{' '.join(self.argv)}")

    def describe(self, rc):
        if rc is None and self.start_error:
            return f"could not be started ({self.start_error})"
        return "(guest QEMU) " + describe_status(rc)

    def to_state(self):
        st = NfSlot.to_state(self)
        st.update(kind="guest", port=self.guest["port"], socket=self.socket_path, ip=self.guest.get("ip"),
                  memory=self.guest["memory"], vcpus=self.guest["vcpus"])
        return st


class StackSlot(NfSlot):
    """sluice-stackd, the socket service (docs/sockets.md; the config's `stack:`): a process of its own
    beside sluiced, not attached to it. Supervised like an NF (log, restarts: always, stopped at `sluice
    down`); its sockets are stack.sock and stack-ctl.sock in the socket dir."""

    NAME = "sluice-stackd"

    def __init__(self, argv, log_path, env_extra=None):
        env = {k: v for k, v in os.environ.items() if k not in ("LD_PRELOAD", "SLUICE_STACK", "SLUICE_RATE")}
        env.update(env_extra or {})
        NfSlot.__init__(self, self.NAME, {"name": None, "restart": "always"}, argv, env, log_path)
        self.sandbox = "none"

    def describe(self, rc):
        if rc is None and self.start_error:
            return f"could not be started ({self.start_error})"
        return "(the socket service) " + describe_status(rc)

    def nf_names(self):
        return []

    def to_state(self):
        st = NfSlot.to_state(self)
        st["kind"] = "stack"
        return st


class ExporterSlot(StackSlot):
    """The Prometheus exporter (`metrics:`; docs/observability.md): `sluice metrics --listen ADDR` for our
    socket dir, a process of its own beside sluiced (a slow scrape never holds up the supervisor), restarted
    like the socket service."""

    NAME = "sluice-exporter"
    COMMAND, KIND, WHAT = "metrics", "exporter", "the metrics exporter"

    def __init__(self, socket_dir, listen, log_path):
        argv = [sys.executable, "-m", "sluice", self.COMMAND, "--socket-dir", socket_dir, "--listen", listen]
        env = dict(os.environ)
        pkg = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
        env["PYTHONPATH"] = pkg + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
        NfSlot.__init__(self, self.NAME, {"name": None, "restart": "always"}, argv, env, log_path)
        self.sandbox = "none"
        self.listen = listen

    def describe(self, rc):
        if rc is None and self.start_error:
            return f"could not be started ({self.start_error})"
        return f"({self.WHAT} on {self.listen}) " + describe_status(rc)

    def to_state(self):
        st = NfSlot.to_state(self)
        st["kind"] = self.KIND
        st["listen"] = self.listen
        return st


class WebSlot(ExporterSlot):
    """The web view (`web:`; docs/observability.md "Web view"): `sluice web --listen ADDR`, run and restarted
    as the exporter is."""

    NAME = "sluice-web"
    COMMAND, KIND, WHAT = "web", "web", "the web view"


class GroupSlot(NfSlot):
    """One process of an NF group (docs/groups.md; the config's groups: / nfs[].group): sluice-group
    hosting instance k of every member, each attached to sluiced as an NF of its own. Supervised like an
    NF process (log, the group's restart policy and backoff, cpus, cpu_weight); its death -- a crash of
    any member ends the process -- restarts the whole group. The members have no slot of their own:
    whatever names one of them (status, logs/<member>.log, scale, reload) finds this slot."""

    def __init__(self, name, group, k, members, argv, env, log_path):
        nf = {"name": None, "restart": group["restart"], "cpus": group.get("cpus"),
              "cpu_weight": group.get("cpu_weight"), "sandbox": "none"}
        super().__init__(name, nf, argv, env, log_path)
        self.group = group["name"]
        self.index = k
        self.members = [inst for inst, _ in members]          # ["fw.0", "nat.0"]
        self.member_services = [nf["name"] for _, nf in members]
        self.label = f"group {name} ({', '.join(self.members)})"

    def nf_names(self):
        return list(self.members)

    def describe(self, rc):
        if rc is None and self.start_error:
            return f"could not be started ({self.start_error})"
        return "(the group's process) " + describe_status(rc)

    def to_state(self):
        st = NfSlot.to_state(self)
        st.update(kind="group", group=self.group, members=list(self.members), services=list(self.member_services))
        return st


# --------------------------------------------------------------- supervisor

class Supervisor:
    def __init__(self, cfg, socket_dir, config_path=None, build_dir=None, log_level=None,
                 ready_timeout=20.0, attach_timeout=15.0):
        self.cfg = cfg
        self.socket_dir = os.path.abspath(socket_dir)
        self.config_path = os.path.abspath(config_path) if config_path else None
        self.log_dir = os.path.join(self.socket_dir, "logs")
        self.ctl = os.path.join(self.socket_dir, "ctl.sock")
        self.nf_sock = os.path.join(self.socket_dir, "nf.sock")
        self.json_path = os.path.join(self.socket_dir, "config.json")
        self.log_level = log_level
        self.ready_timeout = ready_timeout
        self.attach_timeout = attach_timeout
        self.build_dir_arg = os.path.abspath(build_dir) if build_dir else None  # -d chdirs to /
        self.sluiced_bin, self.builtins = find_binaries(cfg, build_dir)
        # NF groups (docs/groups.md): sluice-group and the members' plugins; (None, None) without groups
        self.group_bin, self.plugin_dir = find_group_files(cfg, build_dir, self.sluiced_bin, self.builtins)
        # the build tree sluiced came from: guest NFs boot its guest/ image (docs/guests.md)
        self.build_dir = os.path.dirname(os.path.dirname(os.path.dirname(self.sluiced_bin)))
        self.sluiced = None
        self.sluiced_starttime = None
        self.sluiced_log = os.path.join(self.log_dir, "sluiced.log")
        self.runtime_path = os.path.join(self.socket_dir, "runtime.json")  # written by sluiced
        self.sluiced_restarts = 0
        self.sluiced_pidfd = None  # readable once sluiced exits (select in serve_control)
        self.sluiced_deaths = []   # monotonic times of unplanned sluiced exits (the give-up window)
        self._sluiced_log_off = 0
        self.slots = []
        self.removed = []     # [{"seq", "name", "service", "result", "held"}], newest last
        self.removal_seq = 0
        self.sup_sock = supervisor_socket_path(self.socket_dir)
        self.lsock = None
        self.stopping = False
        self.stop_signal = None
        self.started_wall = time.time()
        self.cpu_weights = None  # CpuWeights once an NF has a cpu_weight
        self.uids = sandbox.UidPool()  # the strict NFs' own uids
        self.tokens = sconfig.new_tokens(cfg)  # {service: attach token}, in config.json and SLUICE_NF_TOKEN
        # the socket service (`stack:`): from the same build tree as sluiced
        self.stackd_bin = find_stack_file("sluice-stackd", build_dir, near=self.build_dir) if cfg.get("stack") \
            else None
        self.stack_sock, self.stack_ctl = stack_paths(self.socket_dir)

    # -- checks before anything starts
    def check_not_running(self):
        st = read_state(self.socket_dir)
        if st:
            sup = st.get("supervisor") or {}
            if pid_alive(sup.get("pid"), sup.get("starttime")) and sup.get("pid") != os.getpid():
                raise SupervisorError(f"sluice is already running in {self.socket_dir} (supervisor pid "
                                      f"{sup['pid']}); run `sluice down` first")
        if os.path.exists(self.ctl):
            try:
                with Client(self.ctl, timeout=1.0) as c:
                    pid = c.status().get("pid")
                raise SupervisorError(f"a sluiced (pid {pid}) is already serving {self.ctl}; "
                                      "run `sluice down` first")
            except SluiceError:
                pass  # stale socket: removed in prepare_dir
        if self.stackd_bin and os.path.exists(self.stack_ctl):
            try:
                with Client(self.stack_ctl, timeout=1.0) as c:
                    pid = c.call("status").get("pid")
            except SluiceError:
                return  # stale: sluice-stackd replaces it
            raise SupervisorError(f"a sluice-stackd (pid {pid}) is already serving {self.stack_sock} (`sluice stack "
                                  "serve`?); stop it first or remove `stack:` from the config")

    def prepare_dir(self):
        os.makedirs(self.log_dir, exist_ok=True)
        # runtime.json: changes made at runtime by an earlier `sluice up`; this one starts from the config
        for p in (self.ctl, self.nf_sock, self.runtime_path):
            try:
                os.unlink(p)
            except FileNotFoundError:
                pass
        # Each service's attach token (docs/abi.md "Service tokens") is in config.json, which only
        # root (sluiced's user) may read: 0600 from its creation on.
        fd = os.open(self.json_path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o600)
        os.fchmod(fd, 0o600)
        with os.fdopen(fd, "w") as f:
            f.write(sconfig.to_sluiced_json(self.cfg, socket_dir=self.socket_dir, tokens=self.tokens))

    # -- signals
    def install_signals(self):
        def handler(signum, _frame):
            if not self.stopping:
                self.stop_signal = signum
            self.stopping = True
        for s in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
            signal.signal(s, handler)

    # -- state file
    def write_state(self):
        st = {
            "supervisor": {"pid": os.getpid(), "starttime": proc_starttime(os.getpid())},
            "sluiced": {"pid": self.sluiced.pid if self.sluiced else None,
                        "starttime": self.sluiced_starttime, "binary": self.sluiced_bin,
                        "restarts": self.sluiced_restarts},
            "socket_dir": self.socket_dir,
            "config": self.config_path,
            "started_at": self.started_wall,
            "updated_at": time.time(),
            "nfs": [s.to_state() for s in self.slots],
        }
        try:
            _write_json_atomic(state_path(self.socket_dir), st)
        except OSError as e:
            log(f"warning: cannot write {state_path(self.socket_dir)}: {e.strerror}")

    # -- sluiced
    def start_sluiced(self, resume=False):
        argv = [self.sluiced_bin, "--config", self.json_path, "--socket-dir", self.socket_dir]
        if resume:
            argv += ["--resume", self.runtime_path]
        if self.log_level is not None:
            argv += ["--log-level", str(self.log_level)]
        with open(self.sluiced_log, "ab") as lf:
            lf.write(f"--- {time.strftime('%Y-%m-%d %H:%M:%S')} sluice: starting {' '.join(argv)}\n".encode())
            lf.flush()
            self._sluiced_log_off = lf.tell()
            self.sluiced = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=lf, stderr=subprocess.STDOUT,
                                            start_new_session=True, preexec_fn=_child_setup, close_fds=True)
        self.sluiced_starttime = proc_starttime(self.sluiced.pid)
        if self.sluiced_pidfd is not None:
            os.close(self.sluiced_pidfd)
        try:
            self.sluiced_pidfd = os.pidfd_open(self.sluiced.pid)
        except (OSError, AttributeError):
            self.sluiced_pidfd = None  # an old kernel: its death is noticed within POLL
        log(f"started sluiced (pid {self.sluiced.pid}), log {self.sluiced_log}")
        self.write_state()

    def sluiced_output(self, lines=30):
        return tail(self.sluiced_log, lines, self._sluiced_log_off)

    def wait_sluiced_ready(self):
        deadline = time.monotonic() + self.ready_timeout
        while True:
            rc = self.sluiced.poll()
            if rc is not None:
                raise SupervisorError(f"sluiced {describe_status(rc)} during startup; its output:\n"
                                      + _indent(self.sluiced_output() or "(nothing)"))
            if self.stopping:
                raise SupervisorError("interrupted while waiting for sluiced")
            if os.path.exists(self.ctl):
                try:
                    with Client(self.ctl, timeout=1.0) as c:
                        st = c.status()
                    if os.path.exists(self.nf_sock):
                        return st
                except SluiceError:
                    pass
            if time.monotonic() > deadline:
                raise SupervisorError(f"sluiced did not become ready within {self.ready_timeout:g}s "
                                      f"(no answer on {self.ctl}); its output:\n"
                                      + _indent(self.sluiced_output() or "(nothing)"))
            time.sleep(POLL)

    # -- NFs
    def make_slot(self, name, nf):
        env = dict(os.environ)
        env.update({
            "SLUICE_NF_SOCKET": self.nf_sock,
            "SLUICE_NF_NAME": name,
            "SLUICE_NF_SERVICE": nf["name"],
            "SLUICE_NF_TOKEN": self.tokens[nf["name"]],
            "SLUICE_NF_WAKEUP": nf["wakeup"],
            "SLUICE_NF_BATCH": str(nf["batch"]),
            "SLUICE_NF_TIMEOUT_US": str(nf["timeout_us"]),
            "SLUICE_NF_SPIN_US": str(nf["spin_us"]),
            "SLUICE_NF_REATTACH_MS": str(REATTACH_MS),  # survive a sluiced restart (docs/abi.md "Restarts")
        })
        for var in ("SLUICE_NF_FD", "SLUICE_NF_SANDBOX"):  # only a strict slot's start() sets them
            env.pop(var, None)
        if nf.get("vm"):
            genv = {k: v for k, v in env.items() if k.startswith("SLUICE_NF_")}
            genv["SLUICE_NF_SOCKET"] = "guest"
            try:
                kernel, initrd = guests.image_paths(nf["vm"], self.build_dir)
            except guests.GuestError as e:
                raise SupervisorError(f"NF {name}: {e}") from None
            return GuestSlot(name, nf, [f"{guests.GUEST_BIN}/sluice-nf-{nf['program']}"] + list(nf["args"]), genv,
                             os.path.join(self.log_dir, f"{name}.log"), self.ctl, kernel, initrd)
        argv = [nf_program(nf, self.builtins)] + list(nf["args"])
        log_path = os.path.join(self.log_dir, f"{name}.log")
        if os.path.islink(log_path):  # it was a group member's (a link to its group's log): its own from now on
            os.unlink(log_path)
        uid = None
        if nf.get("sandbox", sconfig.default_sandbox(nf)) == "strict":
            try:
                uid = self.uids.take(name)
            except OSError as e:
                raise SupervisorError(f"NF {name}: sandbox: {e}") from None
        return NfSlot(name, nf, argv, env, log_path, uid=uid, nf_sock=self.nf_sock if uid is not None else None)

    def make_group_slot(self, name, group, k, members):
        """Group instance k (docs/groups.md): one sluice-group process hosting instance k of every member,
        `sluice-group --name G.k --plugin-dir DIR --wakeup W --spin-us N -- PROG --name SVC.k --service SVC
        --batch .. --timeout-us .. --spin-us .. ARGS -- ...`; member i's attach token in SLUICE_NF_TOKEN_<i>."""
        env = dict(os.environ)
        # per member on the command line, or refused by sluice-group (FD, SANDBOX)
        for var in ("SLUICE_NF_NAME", "SLUICE_NF_SERVICE", "SLUICE_NF_TOKEN", "SLUICE_NF_BATCH", "SLUICE_NF_TIMEOUT_US",
                    "SLUICE_NF_SPIN_US", "SLUICE_NF_FD", "SLUICE_NF_SANDBOX"):
            env.pop(var, None)
        for var in [v for v in env if v.startswith("SLUICE_NF_TOKEN_")]:
            env.pop(var)
        env.update({
            "SLUICE_NF_SOCKET": self.nf_sock,
            "SLUICE_NF_WAKEUP": group["wakeup"],
            "SLUICE_NF_REATTACH_MS": str(REATTACH_MS),  # the members survive a sluiced restart as processes do
        })
        argv = [self.group_bin, "--name", name, "--plugin-dir", self.plugin_dir, "--wakeup", group["wakeup"],
                "--spin-us", str(max(nf["spin_us"] for _, nf in members))]
        for i, (inst, nf) in enumerate(members):
            env[f"SLUICE_NF_TOKEN_{i}"] = self.tokens[nf["name"]]
            argv += ["--", nf["program"], "--name", inst, "--service", nf["name"], "--batch", str(nf["batch"]),
                     "--timeout-us", str(nf["timeout_us"]), "--spin-us", str(nf["spin_us"]), *nf["args"]]
        slot = GroupSlot(name, group, k, members, argv, env, os.path.join(self.log_dir, f"{name}.log"))
        self._link_member_logs(slot)
        return slot

    def _link_member_logs(self, slot):
        """logs/<member>.log -> <group>.<k>.log: a member's output is in its group's log."""
        target = os.path.basename(slot.log_path)
        for m in slot.members:
            link = os.path.join(self.log_dir, f"{m}.log")
            try:
                if os.path.islink(link):
                    if os.readlink(link) == target:
                        continue
                    os.unlink(link)
                elif os.path.exists(link):
                    os.replace(link, link + ".prev")  # its own log of an earlier deployment as a process
                os.symlink(target, link)
            except OSError as e:
                log(f"warning: cannot link {link} to {target}: {e.strerror}")

    def make_slots(self):
        for name, nf in sconfig.instance_names(self.cfg):
            if not nf.get("group"):  # a group's members run in its processes (below)
                self.slots.append(self.make_slot(name, nf))
        for name, group, k, members in sconfig.group_slots(self.cfg):
            self.slots.append(self.make_group_slot(name, group, k, members))

    def slot_of(self, name):
        """The slot running NF instance (or process) `name`: a group member's is its group's. None if none."""
        return next((s for s in self.slots if s.name == name), None) or \
            next((s for s in self.slots if name in s.nf_names()), None)

    def start_stack(self):
        """sluice-stackd (`stack:`) in our socket dir; returns once stack-ctl.sock answers."""
        if not self.stackd_bin:
            return
        user = self.cfg["stack"].get("user")
        slot = StackSlot(stack_argv(self.stackd_bin, self.socket_dir, self.cfg["stack"]),
                         os.path.join(self.log_dir, f"{StackSlot.NAME}.log"),
                         env_extra={"SLUICE_NF_TOKEN": self.tokens[user["service"]]} if user else None)
        self.slots.append(slot)
        self.start_slot(slot)
        self.write_state()

        def ready():
            if not os.path.exists(self.stack_ctl):
                return False
            try:
                with Client(self.stack_ctl, timeout=1.0) as c:
                    c.call("status")
            except SluiceError:
                return False
            log(f"socket service ready on {self.stack_sock} (sluice-stackd pid {slot.proc.pid})")
            return True
        self._wait_ready(slot, "sluice-stackd", f"answer on {self.stack_ctl}", ready)

    def _wait_ready(self, slot, what, doing, ready):
        """Until ready() (polled), or SupervisorError naming `what` when its process exits first or
        `doing` takes longer than the ready timeout, with the last lines of its log."""
        deadline = time.monotonic() + self.ready_timeout
        while True:
            if self.stopping:
                raise SupervisorError(f"interrupted while waiting for {what}")
            if slot.proc is None or slot.proc.poll() is not None:
                raise SupervisorError(f"{what} {slot.describe(slot.proc.poll() if slot.proc else None)} "
                                      f"during startup; last lines of {slot.log_path}:\n"
                                      + _indent(tail(slot.log_path, 15) or "(nothing)"))
            if ready():
                return
            if time.monotonic() > deadline:
                raise SupervisorError(f"{what} did not {doing} within {self.ready_timeout:g}s; last lines of "
                                      f"{slot.log_path}:\n" + _indent(tail(slot.log_path, 15) or "(nothing)"))
            time.sleep(POLL)

    def start_exporter(self):
        """The Prometheus exporter (`metrics:`) and the web view (`web:`), once the NFs are attached; returns
        once they listen."""
        for key, cls, path in (("metrics", ExporterSlot, "/metrics"), ("web", WebSlot, "/")):
            m = self.cfg.get(key)
            if not m:
                continue
            slot = cls(self.socket_dir, m["listen"], os.path.join(self.log_dir, f"{cls.NAME}.log"))
            since = os.path.getsize(slot.log_path) if os.path.exists(slot.log_path) else 0  # an earlier run's lines
            self.slots.append(slot)
            self.start_slot(slot)
            self.write_state()
            self._wait_ready(slot, f"{key}: {cls.WHAT}", f"listen on {m['listen']}",
                             lambda: "serving http://" in (tail(slot.log_path, 5, since) or ""))
            log(f"{key} on http://{m['listen']}{path} ({cls.KIND} pid {slot.proc.pid})")

    def start_guests(self):
        """The ordinary guests (`guests:`), once sluiced listens on their vhost-user sockets and the NFs of
        their ports' chains are attached."""
        ports = {p["name"]: p for p in self.cfg["ports"]}
        for g in self.cfg.get("guests") or []:
            try:
                kernel, initrd = guests.image_paths(g, self.build_dir)
            except guests.GuestError as e:
                raise SupervisorError(f"guest {g['name']}: {str(e).replace('set vm.', 'set guests[].')}") from None
            slot = VmGuestSlot(g, sconfig.vhost_socket(ports[g["port"]]), kernel, initrd,
                               os.path.join(self.log_dir, f"{g['name']}.log"))
            self.slots.append(slot)
            self.start_slot(slot)
        self.write_state()

    def start_slot(self, slot):
        try:
            slot.start()
        except OSError as e:
            slot.proc = None
            slot.state = "exited"
            slot.last_rc = None
            slot.start_error = f"{slot.argv[0]}: {e.strerror or e}"
            if slot.sandbox == "strict" and isinstance(e, PermissionError):
                slot.start_error += (f"; under sandbox: strict uid {slot.uid} must be able to execute it "
                                     "(and search every directory above it)")
            log(f"cannot start {slot.label}: {slot.start_error}")
            self._schedule_restart(slot, failed=True, uptime=0.0)
            return
        slot.start_error = None
        log(f"started {slot.label} (pid {slot.proc.pid}"
            + (f", sandbox strict, uid {slot.uid}" if slot.sandbox == "strict" else "")
            + f"), log {slot.log_path}")
        if slot.cpu_weight is not None and self.cpu_weights is not None:
            try:
                self.cpu_weights.place(slot.name, slot.proc.pid, slot.cpu_weight)
            except CgroupError as e:
                log(f"warning: {e}")

    def _schedule_restart(self, slot, failed, uptime):
        policy = slot.policy
        if policy == "never" or (policy == "on-failure" and not failed):
            slot.state = "exited"
            log(f"{slot.label} will not be restarted (restart: {policy})")
            return False
        if uptime >= BACKOFF_RESET:
            slot.backoff = BACKOFF_MIN
        delay = slot.backoff
        slot.backoff = min(slot.backoff * 2, BACKOFF_MAX)
        slot.next_start = time.monotonic() + delay
        slot.state = "backoff"
        log(f"restarting {slot.label} in {delay:.1f}s (restart #{slot.restarts + 1}, restart: {policy})")
        return True

    def supervise_nfs(self):
        """Reap exited NFs and start those whose backoff expired. Returns True
        when anything changed."""
        changed = False
        now = time.monotonic()
        for slot in self.slots:
            if slot.proc is not None and slot.state == "running":
                rc = slot.proc.poll()
                if rc is None:
                    continue
                uptime = now - slot.started_at
                slot.last_rc = rc
                log(f"{slot.label} (pid {slot.proc.pid}) {slot.describe(rc)} after {uptime:.1f}s; "
                    f"last output:\n" + _indent(tail(slot.log_path, 5) or "(nothing)"))
                slot.proc = None
                slot.starttime = None
                again = self._schedule_restart(slot, failed=(rc != 0), uptime=uptime)
                self.notify_status(f"{slot.label} {slot.describe(rc)}" + ("; restarting" if again else ""))
                changed = True
            elif slot.state == "backoff" and slot.next_start is not None and now >= slot.next_start:
                slot.restarts += 1
                self.start_slot(slot)
                self.notify_status(f"{slot.label} restarted (#{slot.restarts})")
                changed = True
        if changed:
            self.write_state()
        return changed

    def attached_names(self, unknown=frozenset()):
        """Names of the NFs sluiced lists as attached; `unknown` when it cannot be asked."""
        try:
            with Client(self.ctl, timeout=2.0) as c:
                return {nf.get("name") for nf in c.nfs()}
        except SluiceError:
            return unknown

    def wait_nfs_attached(self):
        deadline = time.monotonic() + self.attach_timeout
        want = {n for s in self.slots for n in s.nf_names()}
        while want:
            if self.stopping:
                raise SupervisorError("interrupted while waiting for NFs to attach")
            rc = self.sluiced.poll()
            if rc is not None:
                raise SupervisorError(f"sluiced {describe_status(rc)} while NFs were attaching; its output:\n"
                                      + _indent(self.sluiced_output() or "(nothing)"))
            self.supervise_nfs()
            dead = [s for s in self.slots if s.state == "exited"]
            if dead:
                s = dead[0]
                raise SupervisorError(f"{s.label} {s.describe(s.last_rc)} during startup "
                                      f"(restart: {s.policy}); last lines of {s.log_path}:\n"
                                      + _indent(tail(s.log_path, 15) or "(nothing)"))
            missing = want - self.attached_names()
            if not missing:
                return
            if time.monotonic() > deadline:
                s = self.slot_of(sorted(missing)[0])
                raise SupervisorError(
                    f"NF(s) {', '.join(sorted(missing))} did not attach within {self.attach_timeout:g}s "
                    f"({s.name}: {s.state}, {s.restarts} restarts); last lines of {s.log_path}:\n"
                    + _indent(tail(s.log_path, 15) or "(nothing)"))
            time.sleep(POLL)

    # -- control socket (sluice nf scale)
    def open_control(self):
        try:
            os.unlink(self.sup_sock)
        except FileNotFoundError:
            pass
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            s.bind(self.sup_sock)
            os.chmod(self.sup_sock, 0o600)
            s.listen(8)
        except OSError as e:
            s.close()
            raise SupervisorError(f"cannot listen on {self.sup_sock}: {e.strerror or e}") from None
        s.setblocking(False)
        self.lsock = s

    def close_control(self):
        if self.lsock is not None:
            self.lsock.close()
            self.lsock = None
        try:
            os.unlink(self.sup_sock)
        except FileNotFoundError:
            pass

    def serve_control(self, timeout):
        """Wait up to `timeout` seconds for a request on supervisor.sock and answer it."""
        # sluiced's pidfd wakes us the moment it dies: a restart need not wait out the poll interval
        fds = [f for f in (self.lsock, self.sluiced_pidfd) if f is not None]
        if not fds:
            time.sleep(timeout)
            return
        try:
            ready, _, _ = select.select(fds, [], [], timeout)
        except InterruptedError:
            return
        if self.lsock is None or self.lsock not in ready:
            return
        try:
            conn, _ = self.lsock.accept()
        except OSError:
            return
        with conn:
            conn.settimeout(2.0)
            buf = b""
            try:
                while b"\n" not in buf and len(buf) < 65536:
                    chunk = conn.recv(4096)
                    if not chunk:
                        break
                    buf += chunk
                line = buf.partition(b"\n")[0]
                try:
                    req = json.loads(line)
                    resp = self.handle_request(req) if isinstance(req, dict) else \
                        {"ok": False, "error": "request must be a JSON object"}
                except ValueError:
                    resp = {"ok": False, "error": "request is not JSON"}
                conn.sendall(json.dumps(resp).encode() + b"\n")
            except OSError:
                pass  # the client went away; nothing to answer

    def handle_request(self, req):
        cmd = req.get("cmd")
        if cmd == "nfs":
            return {"ok": True, "nfs": [s.to_state() for s in self.slots], "removed": self.removed}
        if cmd == "restart":
            try:
                return dict(ok=True, **self.restart_sluiced(planned=True))
            except SupervisorError as e:
                return {"ok": False, "error": str(e)}
        if cmd == "reload":
            try:
                return dict(ok=True, **self.reload(req.get("path"), bool(req.get("dry_run"))))
            except SupervisorError as e:
                return {"ok": False, "error": str(e)}
        if cmd == "scale":
            try:
                return dict(ok=True, **self.scale(req.get("service"), req.get("instances"),
                                                  req.get("drain_timeout", DRAIN_TIMEOUT)))
            except SupervisorError as e:
                return {"ok": False, "error": str(e)}
        return {"ok": False, "error": f"unknown command {cmd!r} (known: nfs, scale, restart, reload)"}

    def scale(self, service, instances, drain_timeout):
        """Start or drain replicas so `service` has `instances` of them. Returns what it started and
        what it began to drain; draining finishes in the loop (supervise_drains)."""
        nf = next((n for n in self.cfg["nfs"] if n["name"] == service), None)
        group = next((g for g in self.cfg.get("groups") or [] if g["name"] == service), None)
        if nf is not None and nf.get("group"):
            procs = [s.name for s in self.slots if isinstance(s, GroupSlot) and s.group == nf["group"]]
            raise SupervisorError(f"scale: service {service!r} is in group {nf['group']!r} (its instances run in the "
                                  f"group's process(es) {', '.join(procs) or '-'}): a group member cannot be "
                                  f"scaled or stopped alone; scale the group: `sluice nf scale {nf['group']} N`")
        if nf is None and group is None:
            known = ", ".join([n["name"] for n in self.cfg["nfs"]] + [g["name"] for g in self.cfg.get("groups") or []])
            what = "service or group" if self.cfg.get("groups") else "service"
            raise SupervisorError(f"scale: field 'service': unknown {what} {service!r} (known: {known or 'none'})")
        if isinstance(instances, bool) or not isinstance(instances, int) or not 1 <= instances <= MAX_INSTANCES:
            raise SupervisorError(f"scale: field 'instances': must be an integer 1..{MAX_INSTANCES} "
                                  f"(got {instances!r})")
        if isinstance(drain_timeout, bool) or not isinstance(drain_timeout, (int, float)) or drain_timeout <= 0:
            raise SupervisorError(f"scale: field 'drain_timeout': must be a positive number of seconds "
                                  f"(got {drain_timeout!r})")
        self.supervise_nfs()  # learn of replicas that exited since the last tick before counting
        if group is not None:
            return self.scale_group(group, instances, drain_timeout)
        mine = [s for s in self.slots if s.service == service and s.state != "draining"]
        since = self.removal_seq
        started, draining = self._scale_slots(mine, instances, drain_timeout, 1,
                                              lambda k: [f"{service}.{k}"],
                                              lambda k: self.make_slot(f"{service}.{k}", nf))
        nf["instances"] = instances
        self.write_state()
        log(f"scale {service} to {instances}: start {', '.join(started) or '-'}; "
            f"drain {', '.join(draining) or '-'}")
        return {"service": service, "instances": instances, "start": started, "drain": draining,
                "removed_after": since}

    def _scale_slots(self, mine, instances, drain_timeout, per_slot, names, make):
        """Start or drain slots of `mine` (a service's replicas, a group's processes) until `instances`
        run: new ones take the lowest k whose names(k) are all free, built by make(k), each attaching
        per_slot NF instances; removed ones are drained (_scale_victims, begin_drain). Returns
        (started, draining) slot names."""
        started, draining = [], []
        if instances > len(mine):
            max_nfs = self.cfg["sluiced"]["max_nfs"]
            total = sum(len(s.nf_names()) for s in self.slots) + (instances - len(mine)) * per_slot
            if total > max_nfs:
                raise SupervisorError(f"scale: {total} NF instances would exceed sluiced.max_nfs ({max_nfs})")
            used = {s.name for s in self.slots} | {m for s in self.slots for m in s.nf_names()}
            k = 0
            for _ in range(instances - len(mine)):
                while any(n in used for n in names(k)):
                    k += 1
                slot = make(k)
                used |= {slot.name, *slot.nf_names()}
                self.slots.append(slot)
                self.start_slot(slot)
                started.append(slot.name)
        elif instances < len(mine):
            for slot in self._scale_victims(mine, len(mine) - instances):
                draining.append(slot.name)
                self.begin_drain(slot, drain_timeout)
        return started, draining

    def _scale_victims(self, mine, n):
        """The n slots of `mine` to drain: those that carry no traffic first (nothing to drain): dead
        ones, and running ones sluiced does not list -- not attached yet, or dying: a killed NF's socket
        closes (and sluiced drops it) before its process can be reaped, so poll() may still say running.
        Then the highest-numbered of the rest. A group process carries traffic while any member is listed."""
        attached = self.attached_names(unknown=None)  # None: cannot tell, go by the processes alone

        def carries_traffic(s):
            return s.state == "running" and (attached is None or any(m in attached for m in s.nf_names()))

        def index(s):
            idx = s.name.rsplit(".", 1)[-1]
            return int(idx) if idx.isdigit() else -1
        return sorted(mine, key=lambda s: (carries_traffic(s), -index(s)))[:n]

    def scale_group(self, group, instances, drain_timeout):
        """A group scales as a service does (docs/groups.md): N processes, process k hosting instance k of
        every member, so each member service gets N replicas and sluiced's policies choose among them.
        New processes start; removed ones are drained (every member out of its service, then stopped
        once none holds anything), as replicas are."""
        name = group["name"]
        members = [nf for nf in self.cfg["nfs"] if nf.get("group") == name]
        mine = [s for s in self.slots if isinstance(s, GroupSlot) and s.group == name and s.state != "draining"]
        since = self.removal_seq
        started, draining = self._scale_slots(
            mine, instances, drain_timeout, len(members),
            lambda k: [f"{name}.{k}"] + [f"{nf['name']}.{k}" for nf in members],
            lambda k: self.make_group_slot(f"{name}.{k}", group, k, [(f"{nf['name']}.{k}", nf) for nf in members]))
        group["instances"] = instances
        for nf in members:
            nf["instances"] = instances
        self.write_state()
        log(f"scale group {name} to {instances}: start {', '.join(started) or '-'}; "
            f"drain {', '.join(draining) or '-'}")
        return {"service": name, "group": True, "instances": instances, "start": started, "drain": draining,
                "members": {s.name: s.nf_names() for s in self.slots if s.name in started},
                "services": [nf["name"] for nf in members], "removed_after": since}

    # -- sluice reload (python/sluice/reload.py; docs/architecture.md "Reload")
    def reload(self, path, dry_run):
        """Plan the change from the running deployment to the config in `path`, and apply it unless
        dry_run or refused. Returns {"plan", "applied", "dry_run"}; raises SupervisorError when the file
        does not validate (nothing changed) or a step fails (the steps before it stay applied)."""
        if not isinstance(path, str) or not path:
            raise SupervisorError("reload: field 'path': the config file to load")
        try:
            new = sconfig.load_file(path)
        except sconfig.ConfigError as e:
            raise SupervisorError(f"reload: {e}; nothing was changed") from None
        except OSError as e:
            raise SupervisorError(f"reload: cannot read {path}: {e.strerror}; nothing was changed") from None
        try:
            with Client(self.ctl, timeout=5.0) as c:
                live = {"ports": c.call("ports")["ports"], "chains": c.call("chains")["chains"],
                        "rules": c.call("rules")["rules"], "services": c.call("stats")["services"]}
        except SluiceError as e:
            raise SupervisorError(f"reload: cannot read sluiced's state: {e}; nothing was changed") from None
        plan = sreload.plan(self.cfg, new, live)
        out = {"plan": plan.to_json(), "applied": [], "dry_run": dry_run}
        if plan.refused or dry_run or not plan.steps:
            if plan.refused:
                log(f"reload {path}: refused ({len(plan.refused)} reason(s)); nothing was changed")
            return out
        try:
            _, builtins = find_binaries(new, self.build_dir_arg)
        except SupervisorError as e:
            raise SupervisorError(f"reload: {e}; nothing was changed") from None
        self.builtins.update(builtins)
        log(f"reload {path}: {len(plan.steps)} step(s)")
        notify.notify(RELOADING=1, STATUS=f"reloading {path}: {len(plan.steps)} step(s)")
        try:
            return self._reload_apply(path, new, plan, out)
        finally:
            notify.notify(READY=1)
            self.notify_status(f"reloaded {path}")

    def _reload_apply(self, path, new, plan, out):
        for i, step in enumerate(plan.steps):
            try:
                self._reload_step(step)
            except (SluiceError, SupervisorError, OSError) as e:
                done = "; ".join(out["applied"]) or "nothing"
                raise SupervisorError(f"reload: step {i + 1} ({step['text']}) failed: {e}; applied before it: "
                                      f"{done}; the steps after it were not applied") from None
            out["applied"].append(step["text"])
            log(f"reload: {step['text']}")
        # the new config is the deployment's from now on: a sluiced restart starts from it
        self.cfg = new
        self.config_path = os.path.abspath(path)
        fd = os.open(self.json_path + ".tmp", os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o600)
        with os.fdopen(fd, "w") as f:
            f.write(sconfig.to_sluiced_json(new, socket_dir=self.socket_dir, tokens=self.tokens))
        os.replace(self.json_path + ".tmp", self.json_path)
        self.write_state()
        return out

    def _cfg_nf(self, nf):
        """Put the new definition of a service into the running config (in place of the old one)."""
        for i, o in enumerate(self.cfg["nfs"]):
            if o["name"] == nf["name"]:
                self.cfg["nfs"][i] = dict(nf, instances=o["instances"])
                return self.cfg["nfs"][i]
        raise SupervisorError(f"unknown service {nf['name']!r}")

    def _wait_attached(self, names):
        deadline = time.monotonic() + self.attach_timeout
        while names - self.attached_names(unknown=set()):
            if time.monotonic() > deadline:
                raise SupervisorError(f"{', '.join(sorted(names - self.attached_names()))} did not attach within "
                                      f"{self.attach_timeout:g}s")
            self.supervise_nfs()
            time.sleep(POLL)

    def _reload_step(self, step):
        kind = step["kind"]
        if kind == "api":
            req = dict(step["request"])
            with Client(self.ctl, timeout=10.0) as c:
                c.call(req.pop("cmd"), **req)
        elif kind == "nf_replace":
            nf = self._cfg_nf(step["nf"])
            if nf.get("group"):  # it runs in its group's processes: restart those, with the new definition
                self._wait_attached(self._restart_group(nf["group"]))
                return
            names = set()
            for i, slot in enumerate(list(self.slots)):
                if slot.service != nf["name"] or slot.state == "draining":
                    continue
                if slot.proc is not None and slot.proc.poll() is None:
                    slot.proc.send_signal(signal.SIGTERM)
                    _wait_or_kill(slot.proc, NF_STOP_GRACE, slot.label)
                self.uids.release(slot.name)
                fresh = self.make_slot(slot.name, nf)
                fresh.restarts = slot.restarts
                self.slots[self.slots.index(slot)] = fresh
                self.start_slot(fresh)
                names.add(fresh.name)
            self._wait_attached(names)
        elif kind == "nf_scale":
            self._cfg_nf(step["nf"])
            r = self.scale(step["service"], step["instances"], DRAIN_TIMEOUT)
            self._wait_attached(set(r["start"]))
        elif kind == "nf_remove":
            g = next((s.group for s in self.slots if isinstance(s, GroupSlot) and step["service"] in s.member_services),
                     None)
            if g is not None:
                raise SupervisorError(f"service {step['service']!r} is in group {g!r}: a group member cannot be "
                                      "removed alone (`sluice down` and `up` again)")
            for slot in [s for s in self.slots if s.service == step["service"]]:
                self.begin_drain(slot, DRAIN_TIMEOUT)
        else:
            raise SupervisorError(f"unknown step kind {kind!r}")

    def _restart_group(self, group):
        """Stop and start again every process of `group` with the running config's definitions. Returns the
        member instances to wait for."""
        fresh = {name: (g, k, members) for name, g, k, members in sconfig.group_slots(self.cfg)}
        names = set()
        for slot in [s for s in self.slots if isinstance(s, GroupSlot) and s.group == group]:
            if slot.proc is not None and slot.proc.poll() is None:
                slot.proc.send_signal(signal.SIGTERM)
                _wait_or_kill(slot.proc, NF_STOP_GRACE, slot.label)
            new = self.make_group_slot(slot.name, *fresh[slot.name])
            new.restarts = slot.restarts
            self.slots[self.slots.index(slot)] = new
            self.start_slot(new)
            names.update(new.nf_names())
        return names

    def begin_drain(self, slot, timeout):
        if slot.state != "running" or slot.proc is None:
            self.finish_removal(slot, "not running")
            return
        for name in slot.nf_names():  # a group process: every member
            try:
                with Client(self.ctl, timeout=2.0) as c:
                    c.call("nf_drain", name=name)
            except SluiceError as e:
                # Not attached (yet, or any more): it holds no packets of ours.
                log(f"NF {name}: nf_drain: {e}" + ("; stopping it" if name == slot.name else ""))
        slot.state = "draining"
        slot.drain_deadline = time.monotonic() + timeout

    def supervise_drains(self):
        """Stop each draining replica once sluiced says it holds nothing (or its time is up)."""
        draining = [s for s in self.slots if s.state == "draining"]
        if not draining:
            return
        try:
            with Client(self.ctl, timeout=2.0) as c:
                attached = {n.get("name"): n for n in c.nfs()}
        except SluiceError:
            attached = None  # sluiced busy: look again on the next tick
        for slot in draining:
            if slot.proc is None or slot.proc.poll() is not None:
                self.finish_removal(slot, "exited while draining")
                continue
            if attached is not None:
                # detached NFs: sluiced took back what they held; a group's members are summed
                held = [attached[m] for m in slot.nf_names() if m in attached]
                slot.held = {"queued": sum(n.get("queued", 0) for n in held), "lent": sum(n.get("lent", 0) for n in held)}
                if not slot.held["queued"] and not slot.held["lent"]:
                    self.finish_removal(slot, "drained")
                    continue
            if time.monotonic() > slot.drain_deadline:
                self.finish_removal(slot, "drain timeout")

    def finish_removal(self, slot, result):
        p = slot.proc
        if p is not None and p.poll() is None:
            p.send_signal(signal.SIGTERM)
            _wait_or_kill(p, NF_STOP_GRACE, f"NF {slot.name}")
        if p is not None:
            slot.last_rc = p.returncode
        slot.proc = None
        slot.state = "stopped"
        if self.cpu_weights is not None:
            self.cpu_weights.release(slot.name)
        self.uids.release(slot.name)
        if slot in self.slots:
            self.slots.remove(slot)
        self.removal_seq += 1
        self.removed.append({"seq": self.removal_seq, "name": slot.name, "service": slot.service,
                             "result": result, "held": slot.held})
        del self.removed[:-REMOVED_KEEP]
        log(f"{slot.label} removed from " + (f"service {slot.service}" if slot.service else "its services") + f" ({result}"
            + (f"; held queued={slot.held['queued']} lent={slot.held['lent']}" if slot.held and result != "drained"
               else "") + ")")
        self.write_state()

    # -- lifecycle
    def start(self):
        """Bring everything up. Raises SupervisorError (after tearing down
        whatever started)."""
        strict = [i for i, nf in enumerate(self.cfg.get("nfs") or [])
                  if nf.get("sandbox", sconfig.default_sandbox(nf)) == "strict"]
        why = sandbox.check_privileges() if strict else None
        if why:
            raise SupervisorError(f"nfs[{strict[0]}].sandbox: strict {why}")
        self.check_not_running()
        self.prepare_dir()
        self.write_state()
        try:
            self.open_control()
            notify.notify(STATUS="starting sluiced")
            self.start_sluiced()
            st = self.wait_sluiced_ready()
            log(f"sluiced ready (version {st.get('version', '?')}, huge pages "
                f"{'yes' if st.get('huge_pages') else 'no'}, {st.get('mbufs', '?')} mbufs)")
            notify.notify(STATUS=f"sluiced ready (pid {self.sluiced.pid}); starting the NFs")
            self.make_slots()
            weighted = [i for i, nf in enumerate(self.cfg.get("nfs") or []) if nf.get("cpu_weight") is not None]
            if weighted:
                try:
                    self.cpu_weights = CpuWeights(os.getpid())
                except CgroupError as e:
                    raise SupervisorError(f"nfs[{weighted[0]}].cpu_weight: {e}") from e
            for slot in self.slots:
                self.start_slot(slot)
            self.write_state()
            self.wait_nfs_attached()
            self.start_stack()
            self.start_exporter()
            self.start_guests()
        except BaseException:
            self.teardown()
            raise
        self.write_state()

    def summary(self):
        nfs = [n for s in self.slots for n in s.nf_names()]
        vms = [s.name for s in self.slots if isinstance(s, VmGuestSlot)]
        groups = [s.name for s in self.slots if isinstance(s, GroupSlot)]
        names = " ".join(nfs) or "none"
        return (f"sluice up: sluiced pid {self.sluiced.pid}, {len(nfs)} NF(s) attached ({names}); "
                + (f"{len(groups)} group process(es) ({' '.join(groups)}); " if groups else "")
                + (f"{len(vms)} guest(s) started ({' '.join(vms)}); " if vms else "")
                + (f"socket service on {self.stack_sock}; " if self.stackd_bin else "")
                + f"control {self.ctl}; logs in {self.log_dir}")

    # -- sluiced restarts (docs/architecture.md "Restarts")
    def restart_sluiced(self, planned):
        """Start a new sluiced on the same config, sockets and tokens, resuming the runtime state.
        planned: ask the running one to stop for a restart first (its NFs hand back what they hold).
        Returns {"pid", "old_pid", "seconds"}; raises SupervisorError if the new one does not come up."""
        t0 = time.monotonic()
        old = self.sluiced
        if planned and old is not None and old.poll() is None:
            log(f"restarting sluiced (pid {old.pid}): planned")
            try:
                with Client(self.ctl, timeout=2.0) as c:
                    c.call("shutdown", restart=True)
            except SluiceError as e:
                log(f"restart request failed ({e}); sending SIGTERM")
                old.send_signal(signal.SIGTERM)
            _wait_or_kill(old, SLUICED_STOP_GRACE, "sluiced")
            log(f"old sluiced {describe_status(old.returncode)}")
        # a killed sluiced leaves its socket files: the new one must not be mistaken for it
        for p in (self.ctl, self.nf_sock):
            try:
                os.unlink(p)
            except FileNotFoundError:
                pass
        self.start_sluiced(resume=True)
        try:
            st = self.wait_sluiced_ready()
        except SupervisorError as e:
            raise SupervisorError(f"restart: {e}") from None
        self.sluiced_restarts += 1
        secs = time.monotonic() - t0
        log(f"sluiced restarted (pid {self.sluiced.pid}, was {old.pid if old else '-'}) in {secs:.2f}s "
            f"({st.get('mbufs', '?')} mbufs); the NFs attach again by themselves")
        self.notify_status(f"sluiced restarted ({'planned' if planned else 'after it died'})")
        self.write_state()
        return {"pid": self.sluiced.pid, "old_pid": old.pid if old else None, "seconds": round(secs, 3)}

    def sluiced_died(self, src):
        """sluiced exited without being asked: restart it (returns True), or give up (False) if it
        keeps dying."""
        log(f"sluiced (pid {self.sluiced.pid}) {describe_status(src)}; its last output:\n"
            + _indent(self.sluiced_output(20) or "(nothing)"))
        now = time.monotonic()
        self.sluiced_deaths = [t for t in self.sluiced_deaths if now - t < SLUICED_RESTART_WINDOW] + [now]
        notify.notify(STATUS=f"sluiced {describe_status(src)}; restarting it")
        if len(self.sluiced_deaths) > SLUICED_RESTARTS_MAX:
            log(f"sluiced died {len(self.sluiced_deaths)} times within {SLUICED_RESTART_WINDOW:g}s; "
                "not restarting it again: stopping everything")
            return False
        try:
            self.restart_sluiced(planned=False)
        except SupervisorError as e:
            log(f"{e}; stopping everything")
            return False
        return True

    def notify_status(self, event=None):
        """A STATUS= line for the service manager (python/sluice/notify.py; nothing outside systemd):
        the running NFs, and `event` first when given."""
        if not notify.enabled():
            return
        running = sum(len(s.nf_names()) for s in self.slots if s.state == "running")
        total = sum(len(s.nf_names()) for s in self.slots)
        pid = self.sluiced.pid if self.sluiced else "-"
        notify.notify(STATUS=(f"{event}; " if event else "")
                      + f"sluiced pid {pid}, {running}/{total} NF(s) running")

    def loop(self):
        """Supervise until a stop signal, or until sluiced cannot be restarted. Returns an exit code."""
        rc = 0
        while not self.stopping:
            src = self.sluiced.poll()
            if src is not None and not self.sluiced_died(src):
                rc = 1
                break
            self.supervise_nfs()
            self.supervise_drains()
            self.serve_control(POLL)
        if self.stop_signal is not None:
            log(f"received {signal.Signals(self.stop_signal).name}, stopping")
        self.teardown()
        return rc

    def stop_nfs(self):
        running = [s for s in self.slots if s.proc is not None and s.proc.poll() is None]
        for s in self.slots:
            s.next_start = None
            if s.state in ("backoff", "new"):
                s.state = "stopped"
        for s in running:
            try:
                s.proc.send_signal(signal.SIGTERM)
            except ProcessLookupError:
                pass
        deadline = time.monotonic() + NF_STOP_GRACE
        while time.monotonic() < deadline and any(s.proc.poll() is None for s in running):
            time.sleep(0.05)
        for s in running:
            if s.proc.poll() is None:
                log(f"{s.label} (pid {s.proc.pid}) ignored SIGTERM for {NF_STOP_GRACE:g}s; killing it")
                s.proc.kill()
                s.proc.wait()
            s.last_rc = s.proc.returncode
            s.state = "stopped"
            s.proc = None
        if running:
            log(f"stopped {len(running)} NF(s)")

    def stop_sluiced(self):
        p = self.sluiced
        if p is None or p.poll() is not None:
            return
        try:
            with Client(self.ctl, timeout=2.0) as c:
                c.shutdown()
        except SluiceError as e:
            log(f"shutdown request failed ({e}); sending SIGTERM")
            p.send_signal(signal.SIGTERM)
        _wait_or_kill(p, SLUICED_STOP_GRACE, "sluiced")
        log(f"sluiced {describe_status(p.returncode)}")

    def teardown(self):
        # A second Ctrl-C must not interrupt the teardown half-way.
        for s in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
            try:
                signal.signal(s, signal.SIG_IGN)
            except (ValueError, OSError):
                pass
        self.stopping = True
        notify.notify(STOPPING=1)
        self.close_control()
        self.stop_nfs()
        if self.cpu_weights is not None:
            self.cpu_weights.close()
            self.cpu_weights = None
        self.stop_sluiced()
        if self.sluiced_pidfd is not None:
            os.close(self.sluiced_pidfd)
            self.sluiced_pidfd = None
        stack = (self.stack_sock, self.stack_ctl) if self.stackd_bin else ()  # left by a killed sluice-stackd
        for path in (self.ctl, self.nf_sock, state_path(self.socket_dir), *stack):
            try:
                os.unlink(path)
            except FileNotFoundError:
                pass
            except OSError as e:
                log(f"warning: cannot remove {path}: {e.strerror}")


# ------------------------------------------------------------------ sluice up

def run_up(cfg, socket_dir, config_path=None, build_dir=None, log_level=None, detach=False,
           ready_timeout=20.0, attach_timeout=15.0, out=sys.stdout):
    """Implement `sluice up`. Returns the exit code."""
    # under systemd (Type=notify): READY=1 / STOPPING=1 from here; no child inherits $NOTIFY_SOCKET
    notify.take_socket()
    try:
        sup = Supervisor(cfg, socket_dir, config_path, build_dir, log_level, ready_timeout, attach_timeout)
        sup.check_not_running()
        os.makedirs(sup.log_dir, exist_ok=True)
    except SupervisorError as e:
        print(f"sluice up: {e}", file=sys.stderr)
        return 1
    except OSError as e:
        print(f"sluice up: cannot create {socket_dir}: {e.strerror}", file=sys.stderr)
        return 1
    if detach:
        return _up_detached(sup, out)
    sup.install_signals()
    try:
        sup.start()
    except SupervisorError as e:
        print(f"sluice up: {e}", file=sys.stderr)
        return 1
    print(sup.summary() + ". Ctrl-C or `sluice down` stops it.", file=out, flush=True)
    notify.ready(sup.summary())
    return sup.loop()


def _up_detached(sup, out):
    log_path = os.path.join(sup.log_dir, "supervisor.log")
    r, w = os.pipe()
    sys.stdout.flush()
    sys.stderr.flush()
    pid = os.fork()
    if pid:
        os.close(w)
        os.waitpid(pid, 0)  # the intermediate child exits at once
        chunks = []
        while True:
            b = os.read(r, 65536)
            if not b:
                break
            chunks.append(b)
        os.close(r)
        msg = b"".join(chunks).decode(errors="replace")
        if msg.startswith("OK "):
            print(msg[3:].rstrip("\n") + f". Supervisor log: {log_path}; `sluice down` stops it.",
                  file=out, flush=True)
            return 0
        if msg.startswith("ERR "):
            print(f"sluice up: {msg[4:].rstrip()}", file=sys.stderr)
        else:
            print(f"sluice up: the supervisor exited during startup; see {log_path}:\n"
                  + _indent(tail(log_path, 20) or "(nothing)"), file=sys.stderr)
        return 1

    # first child: new session, then fork again so the supervisor is no session leader
    os.close(r)
    try:
        os.setsid()
        if os.fork():
            os._exit(0)
        os.chdir("/")
        fd = os.open(log_path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        null = os.open(os.devnull, os.O_RDONLY)
        os.dup2(null, 0)
        os.dup2(fd, 1)
        os.dup2(fd, 2)
        os.close(null)
        os.close(fd)
        sys.stdout = os.fdopen(1, "w", buffering=1)
        sys.stderr = os.fdopen(2, "w", buffering=1)
    except BaseException:  # noqa: BLE001
        os._exit(1)

    code = 1
    try:
        log(f"supervisor pid {os.getpid()} starting (socket dir {sup.socket_dir})")
        sup.install_signals()
        try:
            sup.start()
        except SupervisorError as e:
            log(f"startup failed: {e}")
            os.write(w, f"ERR {e}\n".encode())
            os.close(w)
            os._exit(1)
        log(sup.summary())
        notify.ready(sup.summary(), forked=True)  # MAINPID=: we are not the process systemd started
        os.write(w, f"OK {sup.summary()}\n".encode())
        os.close(w)
        code = sup.loop()
        log(f"supervisor exiting ({code})")
    except BaseException as e:  # noqa: BLE001
        log(f"supervisor crashed: {e!r}")
        try:
            sup.teardown()
        finally:
            os._exit(1)
    os._exit(code)


# ---------------------------------------------------------------- sluice down

def _wait_gone(pid, starttime, timeout):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if not pid_alive(pid, starttime):
            return True
        time.sleep(0.05)
    return not pid_alive(pid, starttime)


def _kill(pid, starttime, sig):
    if pid_alive(pid, starttime):
        try:
            os.kill(pid, sig)
        except ProcessLookupError:
            pass


def stop_running(socket_dir, timeout=20.0, say=print):
    """Implement `sluice down`. Returns 0 when everything is (now) stopped,
    1 when something could not be stopped."""
    socket_dir = os.path.abspath(socket_dir)
    ctl = os.path.join(socket_dir, "ctl.sock")
    st = read_state(socket_dir)
    did = False
    if st:
        sup = st.get("supervisor") or {}
        spid, sst = sup.get("pid"), sup.get("starttime")
        if spid and spid != os.getpid() and pid_alive(spid, sst):
            say(f"stopping supervisor (pid {spid}) ...")
            _kill(spid, sst, signal.SIGTERM)
            did = True
            if not _wait_gone(spid, sst, timeout):
                say(f"supervisor (pid {spid}) did not stop within {timeout:g}s; killing it and its children")
                _kill(spid, sst, signal.SIGKILL)
                _wait_gone(spid, sst, 2.0)
        # Whatever is left (supervisor crashed or was killed): clean up by hand.
        nfs = [n for n in st.get("nfs", []) if pid_alive(n.get("pid"), n.get("starttime"))]
        for n in nfs:
            _kill(n["pid"], n.get("starttime"), signal.SIGTERM)
        for n in nfs:
            if not _wait_gone(n["pid"], n.get("starttime"), NF_STOP_GRACE):
                _kill(n["pid"], n.get("starttime"), signal.SIGKILL)
        if nfs:
            did = True
            say(f"stopped {len(nfs)} leftover NF(s)")
        sd = st.get("sluiced") or {}
        if pid_alive(sd.get("pid"), sd.get("starttime")):
            did = True
            _shutdown_via_socket(ctl, say)
            if not _wait_gone(sd["pid"], sd.get("starttime"), SLUICED_STOP_GRACE):
                say(f"sluiced (pid {sd['pid']}) still running; killing it")
                _kill(sd["pid"], sd.get("starttime"), signal.SIGKILL)
                _wait_gone(sd["pid"], sd.get("starttime"), 2.0)
    elif os.path.exists(ctl):
        # sluiced started by hand, without a supervisor
        try:
            with Client(ctl, timeout=2.0) as c:
                pid = c.status().get("pid")
            did = True
            _shutdown_via_socket(ctl, say)
            if pid and not _wait_gone(pid, None, SLUICED_STOP_GRACE):
                say(f"sluiced (pid {pid}) still running; killing it")
                _kill(pid, None, signal.SIGKILL)
        except SluiceError:
            pass

    left = []
    ours = (st and any(n.get("kind") == "stack" for n in st.get("nfs", []))) and stack_paths(socket_dir) or ()
    for path in (ctl, os.path.join(socket_dir, "nf.sock"), state_path(socket_dir),
                 supervisor_socket_path(socket_dir), *ours):
        if os.path.exists(path):
            left.append(path)
    st_after = read_state(socket_dir)
    if st_after and pid_alive((st_after.get("supervisor") or {}).get("pid"),
                              (st_after.get("supervisor") or {}).get("starttime")):
        say("sluice down: the supervisor is still running")
        return 1
    for path in left:
        try:
            os.unlink(path)
        except OSError:
            pass
    say("sluice stopped" if did else f"sluice is not running (nothing to stop in {socket_dir})")
    return 0


def _shutdown_via_socket(ctl, say):
    try:
        with Client(ctl, timeout=2.0) as c:
            c.shutdown()
        say("sent shutdown to sluiced")
    except SluiceError as e:
        say(f"could not send shutdown to sluiced ({e})")
