"""Per-NF CPU weights in cgroups (config `nfs[].cpu_weight`, docs/architecture.md "Sharing a core").

When NFs outnumber cores the kernel scheduler shares the CPU between them; a weight says how much
each gets under contention (cgroup v2 `cpu.weight`, 1..10000, default 100; on a cgroup v1 `cpu`
hierarchy the same ratio as `cpu.shares`, weight x 1024 / 100). The supervisor makes one group per
NF instance under `sluice-<pid>` and moves the NF's process into it; `close()` removes them all.
"""

from __future__ import annotations

import os

V2_ROOTS = ("/sys/fs/cgroup", "/sys/fs/cgroup/unified")
V1_ROOT = "/sys/fs/cgroup/cpu"


class CgroupError(Exception):
    pass


def find_cpu_controller():
    """(kind, root) of a usable CPU controller, or None: ("v2", root) or ("v1", root)."""
    for root in V2_ROOTS:
        try:
            with open(os.path.join(root, "cgroup.controllers")) as f:
                if "cpu" in f.read().split():
                    return "v2", root
        except OSError:
            pass
    if os.path.exists(os.path.join(V1_ROOT, "cpu.shares")):
        return "v1", V1_ROOT
    return None


def _write(path, value):
    with open(path, "w") as f:
        f.write(str(value))


class CpuWeights:
    def __init__(self, tag):
        found = find_cpu_controller()
        if found is None:
            raise CgroupError("no cgroup CPU controller found (looked for 'cpu' in "
                              + ", ".join(f"{r}/cgroup.controllers" for r in V2_ROOTS)
                              + f" and for {V1_ROOT}/cpu.shares)")
        self.kind, root = found
        self.base = os.path.join(root, f"sluice-{tag}")
        self.groups = {}
        try:
            os.makedirs(self.base, exist_ok=True)
            if self.kind == "v2":  # let the NF groups below use the cpu controller
                _write(os.path.join(root, "cgroup.subtree_control"), "+cpu")
                _write(os.path.join(self.base, "cgroup.subtree_control"), "+cpu")
        except OSError as e:
            raise CgroupError(f"cannot set up {self.base}: {e.strerror or e}") from e

    @staticmethod
    def shares(weight):
        return max(2, weight * 1024 // 100)

    def place(self, name, pid, weight):
        """Move process pid into the group `name` with this weight. Raises CgroupError."""
        d = os.path.join(self.base, name)
        try:
            os.makedirs(d, exist_ok=True)
            if self.kind == "v2":
                _write(os.path.join(d, "cpu.weight"), weight)
            else:
                _write(os.path.join(d, "cpu.shares"), self.shares(weight))
            _write(os.path.join(d, "cgroup.procs"), pid)
        except OSError as e:
            raise CgroupError(f"NF {name}: cannot set its CPU weight in {d}: {e.strerror or e}") from e
        self.groups[name] = d

    def release(self, name):
        """Remove the (empty) group of an NF that is gone."""
        d = self.groups.pop(name, None)
        if d:
            try:
                os.rmdir(d)
            except OSError:
                pass

    def close(self):
        for name in list(self.groups):
            self.release(name)
        try:
            os.rmdir(self.base)
        except OSError:
            pass
