"""`sluice run` and `sluice stack`: unmodified programs' sockets through the socket service
(docs/sockets.md). `run` starts a program with libsluice-sock.so preloaded; `stack serve` runs
sluice-stackd in the foreground; `stack status|stats` ask it over stack-ctl.sock (newline-delimited
JSON, the framing of sluiced's ctl.sock)."""

import argparse
import os
import re
import shutil
import socket
import struct
import subprocess
import sys

from ..client import ApiError, Client, NotRunning, SluiceError, socket_dir_default
from ..fmt import duration, human_bytes, human_count, table
from .common import EXIT_OK, EXIT_USAGE, die, sub

STACKS = ("kernel", "shm", "auto", "user")
# sluice run's own failures, as env(1) reports them: the program's exit status is ours otherwise
EXIT_RUN_FAIL, EXIT_NOT_EXEC, EXIT_NOT_FOUND = 125, 126, 127

_RATE_RE = re.compile(r"(\d+(?:\.\d*)?|\.\d+)\s*([kKMGT]?)(bit/s|bit|bps|b/s|b)?\Z")
_RATE_UNITS = {"": 1, "k": 1e3, "K": 1e3, "M": 1e6, "G": 1e9, "T": 1e12}


def parse_rate(text):
    """A rate in bits per second with an SI suffix ('1G', '500M', '100k', '1.5G', '64000') ->
    bytes per second (int, >= 1). Raises ValueError with a message for the user."""
    m = _RATE_RE.match(str(text).strip())
    if not m:
        raise ValueError(f"{text!r} is not a rate: bits per second with an optional k, M, G or T "
                         "(e.g. 1G, 500M, 100k, 1.5G)")
    bits = float(m.group(1)) * _RATE_UNITS[m.group(2)]
    bps = int(round(bits / 8))
    if bps < 1:
        raise ValueError(f"{text!r} is below 8 bit/s (one byte per second), the least the limit can be; "
                         "leave --rate out for no limit")
    if bps >= 1 << 63:
        raise ValueError(f"{text!r} is too large")
    return bps


def _rate_arg(text):
    try:
        return parse_rate(text)
    except ValueError as e:
        raise argparse.ArgumentTypeError(str(e)) from None


def _power_of_two_kb(text):
    try:
        v = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not an integer") from None
    if not 4 <= v <= 16384 or v & (v - 1):
        raise argparse.ArgumentTypeError(f"{v} is not a power of two 4..16384")
    return v


def _poll_us(text):
    try:
        v = int(text)
    except ValueError:
        v = -1
    if not 0 <= v <= 10000:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number of microseconds 0..10000")
    return v


def _slots(text):
    try:
        v = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not an integer") from None
    if not 1 <= v <= 65536:
        raise argparse.ArgumentTypeError(f"{v} is not in 1..65536")
    return v


def stack_ctl_path(socket_dir=None):
    return os.path.join(socket_dir or socket_dir_default(), "stack-ctl.sock")


def stack_sock_path(socket_dir=None):
    return os.path.join(socket_dir or socket_dir_default(), "stack.sock")


def _not_serving(socket_dir, why):
    sd = socket_dir or socket_dir_default()
    return (f"no socket service at {stack_sock_path(sd)} ({why}); start one with `sluice stack serve"
            + ("" if sd == socket_dir_default() else f" --socket-dir {sd}")
            + "`, or put `stack:` in the config of `sluice up`")


def stack_call(socket_dir, cmd, timeout=5.0):
    """One request to sluice-stackd's control socket: (response dict, raw line). Raises SluiceError
    (NotRunning when nothing answers) with messages about the socket service, not sluiced."""
    path = stack_ctl_path(socket_dir)
    c = Client(path, timeout=timeout)
    try:
        try:
            resp = c.call(cmd)
        except NotRunning:
            raise NotRunning(_not_serving(socket_dir, f"nothing listening on {path}")) from None
        except ApiError as e:
            raise SluiceError(f"sluice-stackd: {e}") from None
        except SluiceError as e:
            raise SluiceError(str(e).replace("sluiced", "sluice-stackd")) from None
        return resp, c.last_raw
    finally:
        c.close()


def stack_stats_or_none(socket_dir, timeout=2.0):
    """sluice-stackd's `stats` when it answers in socket_dir, else None (it is optional)."""
    if not os.path.exists(stack_ctl_path(socket_dir)):
        return None
    try:
        return stack_call(socket_dir, "stats", timeout)[0]
    except SluiceError:
        return None


def _rate_str(bps):
    return "-" if not bps else f"{human_count(bps)}bit/s"


def format_stack_stats(st):
    """The per-program table of sluice-stackd's `stats` (also a section of `sluice stats`)."""
    apps = st.get("apps") or []
    out = [f"SOCKET SERVICE (sluice-stackd)  programs={st.get('apps_total', len(apps))}  "
           f"sockets={st.get('sockets', 0)}"]
    if not apps:
        out.append("(no program connected: start one with `sluice run -- PROGRAM`)")
        return "\n".join(out)
    out.append(table(["NAME", "PIDS", "STACK", "RATE", "SOCKETS", "TX", "RX", "THROTTLED", "KERNEL", "SHM",
                      "CALLS"],
                     [[a.get("name"), ",".join(str(p) for p in a.get("pids") or []) or "-", a.get("stack"),
                       _rate_str(a.get("rate_bps")), a.get("sockets"), human_bytes(a.get("tx_bytes")),
                       human_bytes(a.get("rx_bytes")), a.get("throttled"), a.get("conns_kernel"),
                       a.get("conns_shm"), human_count(a.get("calls"))] for a in apps],
                     right={4, 5, 6, 7, 8, 9, 10}))
    out.append("(TX/RX: bytes the program sent/received; THROTTLED: times its rate limit held it back; "
               "KERNEL/SHM: connections made on each stack module)")
    return "\n".join(out)


# ------------------------------------------------------------------------------------- run

def _check_service(socket_dir):
    """None when stack.sock accepts a connection, else why not (for the user)."""
    path = stack_sock_path(socket_dir)
    if not os.path.exists(path):
        return _not_serving(socket_dir, "no such socket")
    s = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    s.settimeout(2.0)
    try:
        s.connect(path)
    except (ConnectionRefusedError, FileNotFoundError):
        return _not_serving(socket_dir, "nothing listening")
    except PermissionError:
        return f"permission denied connecting to {path}"
    except OSError as e:
        return _not_serving(socket_dir, e.strerror or str(e))
    finally:
        s.close()
    return None


def _check_user_stack(socket_dir):
    """None when sluice-stackd runs its user module (stack.user), else why not."""
    try:
        with Client(os.path.join(socket_dir, "stack-ctl.sock"), timeout=2.0) as c:
            st = c.call("status")
    except SluiceError as e:
        return f"--stack user: cannot ask sluice-stackd whether it runs the user module: {e}"
    u = st.get("user")
    if not u:
        return ("--stack user: sluice-stackd runs no user stack module; give the config a stack.user section "
                "(addresses, egress_chain: docs/sockets.md \"The user module\") and `sluice up` it")
    if not u.get("up"):
        return "--stack user: the user stack module is down (sluiced went away); sluice-stackd restarts"
    return None


def _static_elf(path):
    """True for an ELF executable without an interpreter (statically linked: LD_PRELOAD is ignored)."""
    try:
        with open(path, "rb") as f:
            hdr = f.read(64)
            if len(hdr) < 64 or hdr[:4] != b"\x7fELF" or hdr[4] != 2 or hdr[5] != 1:
                return False  # a script, or not a 64-bit little-endian ELF: say nothing
            phoff, = struct.unpack_from("<Q", hdr, 32)
            phentsize, phnum = struct.unpack_from("<HH", hdr, 54)
            f.seek(phoff)
            ph = f.read(phentsize * phnum)
    except OSError:
        return False
    for i in range(phnum):
        if len(ph) >= (i + 1) * phentsize and struct.unpack_from("<I", ph, i * phentsize)[0] == 3:  # PT_INTERP
            return False
    return True


def _asan_runtime(lib):
    """The ASan runtime an ASan/UBSan build's shim needs loaded first (into an uninstrumented program),
    or None for a normal build."""
    try:
        with open(lib, "rb") as f:
            if b"libasan.so" not in f.read():
                return None
        out = subprocess.run(["ldd", lib], capture_output=True, text=True, timeout=10).stdout
    except (OSError, subprocess.SubprocessError):
        return None
    m = re.search(r"libasan\.so\S*\s+=>\s+(\S+)", out)
    return m.group(1) if m else None


def cmd_run(args):
    from ..supervisor import SupervisorError, find_stack_file
    argv = list(args.program)
    if argv and argv[0] == "--":
        argv = argv[1:]
    if not argv:
        return die("run: name the PROGRAM to start, e.g. `sluice run -- redis-server` (see --help)", EXIT_USAGE)
    socket_dir = os.path.abspath(args.socket_dir or socket_dir_default())
    try:
        lib = find_stack_file("libsluice-sock.so", args.build_dir)
    except SupervisorError as e:
        return die(f"run: {e}", EXIT_RUN_FAIL)
    if any(c in lib for c in " :"):
        return die(f"run: {lib}: LD_PRELOAD cannot name a path with a space or colon", EXIT_RUN_FAIL)
    why = _check_service(socket_dir) or (_check_user_stack(socket_dir) if args.stack == "user" else None)
    if why:
        return die(f"run: {why}", EXIT_RUN_FAIL)
    prog = argv[0]
    path = shutil.which(prog) if "/" not in prog else prog
    if not path or not os.path.exists(path):
        return die(f"run: {prog}: command not found", EXIT_NOT_FOUND)
    if os.path.isdir(path) or not os.access(path, os.X_OK):
        return die(f"run: {prog}: not an executable", EXIT_NOT_EXEC)
    if _static_elf(path):
        print(f"sluice: run: warning: {path} is statically linked; LD_PRELOAD does not reach it, so its sockets "
              "stay the kernel's", file=sys.stderr)
    env = dict(os.environ)
    pre = [p for p in re.split(r"[ :]+", env.get("LD_PRELOAD", "")) if p and p != lib]
    asan = _asan_runtime(lib)  # a sanitizer build of the shim (tests): its runtime goes first
    env["LD_PRELOAD"] = " ".join(([asan] if asan and asan not in pre else []) + [lib] + pre)
    if asan:
        env.setdefault("ASAN_OPTIONS", "detect_leaks=0")
    env["SLUICE_STACK"] = args.stack
    env["SLUICE_SOCKET_DIR"] = socket_dir
    if args.rate is not None:
        env["SLUICE_RATE"] = str(args.rate)
    else:
        env.pop("SLUICE_RATE", None)
    sys.stdout.flush()
    sys.stderr.flush()
    try:
        os.execve(path, argv, env)
    except OSError as e:
        return die(f"run: cannot execute {path}: {e.strerror or e}", EXIT_NOT_EXEC)
    return EXIT_RUN_FAIL  # not reached


# ----------------------------------------------------------------------------------- stack

def cmd_stack_serve(args):
    from ..supervisor import SupervisorError, find_stack_file, stack_argv
    socket_dir = os.path.abspath(args.socket_dir or socket_dir_default())
    if len(socket_dir) + len("/stack-ctl.sock") > 107:
        return die(f"stack serve: socket dir {socket_dir!r} is too long for a UNIX socket path", EXIT_USAGE)
    try:
        stackd = find_stack_file("sluice-stackd", args.build_dir)
    except SupervisorError as e:
        return die(f"stack serve: {e}")
    try:  # sluice-stackd takes over stale sockets: refuse to take a live one's
        st, _ = stack_call(socket_dir, "status", timeout=1.0)
        return die(f"stack serve: a sluice-stackd (pid {st.get('pid')}) already serves {stack_sock_path(socket_dir)}")
    except SluiceError:
        pass
    argv = stack_argv(stackd, socket_dir, {"ring_kb": args.ring_kb, "slots": args.slots, "poll_us": args.poll_us,
                                              "direct": not args.no_direct})
    env = {k: v for k, v in os.environ.items() if k not in ("LD_PRELOAD", "SLUICE_STACK", "SLUICE_RATE")}
    sys.stdout.flush()
    sys.stderr.flush()
    try:
        os.execve(stackd, argv, env)
    except OSError as e:
        return die(f"stack serve: cannot execute {stackd}: {e.strerror or e}")
    return 1  # not reached


def cmd_stack_status(args):
    st, raw = stack_call(args.socket_dir, "status", args.timeout)
    if args.json:
        print(raw)
        return EXIT_OK
    print(f"sluice-stackd {st.get('version', '?')}  pid {st.get('pid')}  up {duration(st.get('uptime_s'))}  "
          f"on {st.get('socket') or stack_sock_path(args.socket_dir)}")
    print(f"{st.get('apps', 0)} program(s), {st.get('sockets', 0)} socket(s), "
          f"{human_bytes(st.get('region_bytes', 0))} of shared regions")
    poll = st.get("poll_us", 0)
    print(f"polls {poll} us after activity, and so do programs' blocking receives" if poll
          else "does not poll (--poll-us 0): the engine and programs sleep until woken")
    print("shm connections of one owner go direct (no engine on their data path)" if st.get("direct", True)
          else "shm connections keep the engine on their data path (--no-direct)")
    u = st.get("user")
    if u:  # the user module (docs/sockets.md "The user module")
        print(f"user module: {u.get('stack')}, service {u.get('service')} ({'up' if u.get('up') else 'DOWN'}), "
              f"{' '.join(u.get('addresses', []))}, MAC {u.get('mac')}, MTU {u.get('mtu')}")
        print(f"  frames in {human_count(u.get('rx_frames', 0))} ({human_bytes(u.get('rx_bytes', 0))}), "
              f"out {human_count(u.get('tx_frames', 0))} ({human_bytes(u.get('tx_bytes', 0))}); "
              f"supply {u.get('supply_held', 0)}/{u.get('supply', 0)} in hand, "
              f"{u.get('tx_no_buffer', 0)} frames lost for want of one")
    else:
        print("no user module (--stack user needs stack.user in the config)")
    return EXIT_OK


def cmd_stack_stats(args):
    st, raw = stack_call(args.socket_dir, "stats", args.timeout)
    if args.json:
        print(raw)
        return EXIT_OK
    print(format_stack_stats(st))
    return EXIT_OK


def _add_socket_dir(p):
    p.add_argument("--socket-dir", metavar="DIR", default=None,
                   help="where sluice-stackd's sockets are (default: $SLUICE_SOCKET_DIR or /run/sluice)")


def register(subs):
    s = sub(subs, "run", "run an unmodified program, its sockets served by sluice-stackd",
            "sluice run -- redis-server --port 6380\n"
            "sluice run --stack shm -- redis-benchmark -p 6380 -q   # both ends shim sockets: ring to ring\n"
            "sluice run --stack kernel --rate 500M -- iperf3 -c 127.0.0.1   # host TCP, at most 500 Mbit/s\n"
            "sluice run --socket-dir /tmp/sl --build-dir build -- curl -s http://127.0.0.1:8080/",
            description="Start PROGRAM with libsluice-sock.so preloaded (LD_PRELOAD, prepended to any already "
                        "set): its AF_INET/AF_INET6 stream and datagram sockets become sockets of sluice-stackd, "
                        "the socket service, which must be serving <socket-dir>/stack.sock (`sluice stack serve`, "
                        "or `stack:` in the config of `sluice up`); everything else stays the kernel's. The "
                        "program must be dynamically linked. Details: docs/sockets.md.\n\n"
                        "Stack modules: kernel (the host's TCP/IP, called by sluice-stackd), shm (both ends of a "
                        "connection are shim sockets on this host: bytes go from ring to ring; a connect() where "
                        "no shim socket listens is refused), auto (shm when a shim socket listens at the "
                        "destination, else kernel), user (sluice-stackd's userspace TCP/IP stack, lwIP: its packets "
                        "cross the NF chains of the config's stack.user and leave by a port).\n\n"
                        "libsluice-sock.so is found via --build-dir, $SLUICE_BUILD_DIR, beside sluice-stackd "
                        "on PATH, then the repo's build/. The program sees SLUICE_STACK, SLUICE_SOCKET_DIR and "
                        "(with --rate) SLUICE_RATE in bytes per second.\n\n"
                        "Exit status: the program's; 125 when sluice run fails itself (no service, no "
                        "library), 126 PROGRAM is not executable, 127 PROGRAM is not found, 2 bad options.")
    s.add_argument("--stack", choices=STACKS, default="auto",
                   help="stack module for the program's sockets (default auto)")
    s.add_argument("--rate", type=_rate_arg, metavar="RATE",
                   help="token bucket on the bytes the program sends, in bits per second with an SI suffix: "
                        "1G, 500M, 100k, 1.5G (default: no limit)")
    _add_socket_dir(s)
    s.add_argument("--build-dir", metavar="DIR", help="meson build directory holding src/sock/libsluice-sock.so")
    s.add_argument("program", nargs=argparse.REMAINDER, metavar="-- PROGRAM [ARGS...]",
                   help="the program and its arguments (after --)")
    s.set_defaults(func=cmd_run)

    s = sub(subs, "stack", "the socket service sluice-stackd: serve, status, stats",
            "sluice stack serve --socket-dir /tmp/sl     # foreground; Ctrl-C stops it\n"
            "sluice stack status\n"
            "sluice stack stats                          # per program: sockets, bytes, throttling")
    ssubs = s.add_subparsers(dest="stack_cmd", metavar="SUBCOMMAND")
    ssubs.required = True
    p = sub(ssubs, "serve", "run sluice-stackd in the foreground, without sluiced",
            "sluice stack serve\nsluice stack serve --socket-dir /tmp/sl --ring-kb 1024 --slots 256",
            description="Run sluice-stackd (found via --build-dir, $SLUICE_BUILD_DIR, PATH, then the repo's "
                        "build/) in the foreground: it serves the programs of `sluice run` on "
                        "<socket-dir>/stack.sock and answers `sluice stack status|stats` on stack-ctl.sock. "
                        "SIGINT/SIGTERM stop it and remove both sockets. `sluice up` runs it for you when its "
                        "config has a `stack:` section.")
    _add_socket_dir(p)
    p.add_argument("--ring-kb", type=_power_of_two_kb, default=256, metavar="N",
                   help="each socket's send and receive ring in KiB, a power of two 4..16384 (default 256)")
    p.add_argument("--slots", type=_slots, default=1024, metavar="N",
                   help="sockets per program, 1..65536 (default 1024)")
    p.add_argument("--poll-us", type=_poll_us, default=0, metavar="N",
                   help="after activity the engine polls N us before sleeping, and a program's blocking "
                        "receive polls its ring as long before it sleeps, 0..10000 (default 0: never; "
                        "docs/sockets.md \"Polling\")")
    p.add_argument("--no-direct", action="store_true",
                   help="keep the engine on the data path of shm connections (by default two ends of one "
                        "owner without a rate limit move bytes ring to ring themselves; docs/sockets.md "
                        "\"Direct connections\")")
    p.add_argument("--build-dir", metavar="DIR", help="meson build directory holding src/stack/sluice-stackd")
    p.set_defaults(func=cmd_stack_serve)
    for name, fn, help_, ex in (
            ("status", cmd_stack_status, "show sluice-stackd's version, uptime, programs and sockets",
             "sluice stack status\nsluice stack status --json     # the `status` response as is"),
            ("stats", cmd_stack_stats, "show each program's sockets, stack module, rate, bytes and throttling",
             "sluice stack stats\nsluice stack stats --json | python3 -m json.tool")):
        p = sub(ssubs, name, help_, ex)
        _add_socket_dir(p)
        p.add_argument("--timeout", type=float, default=5.0, metavar="S",
                       help="seconds to wait for sluice-stackd's answer (default 5)")
        p.add_argument("--json", action="store_true", help="print sluice-stackd's JSON response as is")
        p.set_defaults(func=fn)

