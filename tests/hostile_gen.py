"""Hostile model files and a contained run, for the hostile-input tests.

``gguf_bytes`` writes a GGUF header field by field with whatever counts,
lengths and dimensions a case asks for (nothing is checked: that is the
point); ``patch_u32`` mutates a valid file's metadata value in place.
``contained_run`` runs a profile in a child process, so a crash the lab
failed to contain fails the test instead of the test session, and reports
the rows, whether report.md was written, the wall time and the child's
peak RSS.
"""

from __future__ import annotations

import json
import os
import signal
import struct
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]

U32, I32, F32, STRING, ARRAY, U64 = 4, 5, 6, 8, 9, 10
Q4_0, F32_TYPE = 2, 0


def _string(s: bytes | str, claimed: int | None = None) -> bytes:
    raw = s.encode() if isinstance(s, str) else s
    return struct.pack("<Q", len(raw) if claimed is None else claimed) + raw


def kv(key: str, vtype: int, value: Any) -> bytes:
    out = _string(key) + struct.pack("<I", vtype)
    if vtype == STRING:
        return out + _string(value)
    if vtype == ARRAY:
        sub, items = value
        out += struct.pack("<IQ", sub, len(items))
        return out + b"".join(_string(i) if sub == STRING else struct.pack({U32: "<I", I32: "<i"}[sub], i)
                              for i in items)
    return out + struct.pack({U32: "<I", I32: "<i", F32: "<f", U64: "<Q"}[vtype], value)


def tensor_info(name: str, dims: tuple[int, ...], ttype: int = F32_TYPE, offset: int = 0,
                n_dims: int | None = None) -> bytes:
    out = _string(name) + struct.pack("<I", len(dims) if n_dims is None else n_dims)
    return out + b"".join(struct.pack("<Q", d) for d in dims) + struct.pack("<IQ", ttype, offset)


def gguf_bytes(kvs: list[bytes], tensors: list[bytes], *, n_tensors: int | None = None, n_kv: int | None = None,
               data: bytes = b"", version: int = 3) -> bytes:
    head = b"GGUF" + struct.pack("<IQQ", version, len(tensors) if n_tensors is None else n_tensors,
                                 len(kvs) if n_kv is None else n_kv)
    body = head + b"".join(kvs) + b"".join(tensors)
    body += b"\0" * (-len(body) % 32)
    return body + data


def llama_kvs(block_count: int = 1, hidden: int = 8) -> list[bytes]:
    return [kv("general.architecture", STRING, "llama"), kv("llama.block_count", U32, block_count),
            kv("llama.embedding_length", U32, hidden), kv("llama.attention.head_count", U32, 2)]


def small_gguf(block_count: int = 1) -> bytes:
    """A header that is well formed: two F32 tensors whose data is in the file."""
    return gguf_bytes(llama_kvs(block_count), [tensor_info("token_embd.weight", (8, 4)),
                                               tensor_info("blk.0.attn_norm.weight", (8,), offset=128)],
                      data=b"\0" * 160)


def patch_u32(path: Path, key: str, value: int) -> None:
    """Set a UINT32 / INT32 metadata value of a GGUF file in place."""
    raw = bytearray(path.read_bytes()[: 64 << 20])
    at = raw.find(_string(key))
    assert at > 0, key
    at += 8 + len(key)
    vtype = struct.unpack_from("<I", raw, at)[0]
    assert vtype in (U32, I32), vtype
    with open(path, "r+b") as f:
        f.seek(at + 4)
        f.write(struct.pack("<I", value))


@dataclass
class Contained:
    rc: int
    rows: list[dict[str, Any]]
    report_md: bool
    seconds: float
    rss_bytes: int
    stderr: str


_CHILD = r"""
import json, resource, sys
sys.path.insert(0, sys.argv[3])
from tests.fakes import fake_registry
from lab.profile.load import parse_profile
from lab.render.report import ReportWriter
from lab.runner import Runner
from lab.store import RunStore
reg = fake_registry()
profile = parse_profile(open(sys.argv[1]).read(), sys.argv[1], reg)
store = RunStore(profile, sys.argv[2])
report = ReportWriter(store)
rows = Runner(profile, reg, store, [report]).run()
out = {"rows": [dict(r) for r in rows], "dir": str(store.path), "report_error": report.error}
print("RESULT " + json.dumps(out, default=str))
sys.stdout.flush()
"""


def contained_run(profile_text: str, tmp: Path, timeout: float = 120) -> Contained:
    """Run ``profile_text`` (the fake backend registered beside the real
    ones) in a child process; its rows, report.md, seconds and peak RSS."""
    prof = tmp / "hostile-profile.toml"
    prof.write_text(profile_text, encoding="utf-8")
    t0 = time.monotonic()
    rc, out, err, rss = _wait4([sys.executable, "-c", _CHILD, str(prof), str(tmp / "runs"), str(ROOT)], tmp, timeout)
    took = time.monotonic() - t0
    rows: list[dict[str, Any]] = []
    report = False
    for line in out.splitlines():
        if line.startswith("RESULT "):
            got = json.loads(line[7:])
            rows = got["rows"]
            report = (Path(got["dir"]) / "report.md").is_file() and not got["report_error"]
    return Contained(rc, rows, report, took, rss, err[-4000:])



def _wait4(cmd: list[str], cwd: Path, timeout: float) -> tuple[int, str, str, int]:
    """Run ``cmd`` in its own session; exit status, stdout, stderr and the
    peak RSS in bytes (the child's VmHWM polled every 20 ms, or its whole
    process tree's resident bytes every 100 ms, whichever is larger), killed with
    its group past ``timeout``."""
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, cwd=str(cwd), start_new_session=True)
    got: dict[str, bytes] = {}

    def drain(name: str, stream: Any) -> None:
        got[name] = stream.read()

    readers = [threading.Thread(target=drain, args=(n, s), daemon=True)
               for n, s in (("out", proc.stdout), ("err", proc.stderr))]
    for t in readers:
        t.start()
    end = time.monotonic() + timeout
    peak = 0
    polls = 0
    while True:
        peak = max(peak, _hwm(proc.pid))
        if polls % 5 == 0:  # the arm's own process and what it started count too
            peak = max(peak, _tree_rss(proc.pid))
        polls += 1
        pid, status, usage = os.wait4(proc.pid, os.WNOHANG)
        if pid:
            break
        if time.monotonic() > end:
            os.killpg(proc.pid, signal.SIGKILL)
            pid, status, usage = os.wait4(proc.pid, 0)
            break
        time.sleep(0.02)
    proc.returncode = os.waitstatus_to_exitcode(status)
    for t in readers:
        t.join(timeout=10)
    try:  # a grandchild the lab failed to end: the test says so by its own check, here it is only stopped
        os.killpg(proc.pid, signal.SIGKILL)
    except OSError:
        pass
    figures = os.environ.get("LAB_HOSTILE_FIGURES")
    if figures:  # a JSONL file that collects each child's time and peak RSS, for a summary table
        with open(figures, "a", encoding="utf-8") as f:
            f.write(json.dumps({"test": os.environ.get("PYTEST_CURRENT_TEST", ""), "rc": proc.returncode,
                                "seconds": round(time.monotonic() - (end - timeout), 2),
                                "rss_bytes": peak}) + "\n")
    return (proc.returncode, got.get("out", b"").decode(errors="replace"), got.get("err", b"").decode(errors="replace"),
            peak)


def _hwm(pid: int) -> int:
    """The process's peak RSS so far (VmHWM, bytes), 0 once it is gone.
    Read from /proc while it runs: wait4's ru_maxrss would also count the
    test process's own RSS, which a forked child inherits across exec."""
    try:
        with open(f"/proc/{pid}/status", encoding="ascii") as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError):
        pass
    return 0


def _tree_rss(root: int) -> int:
    """The resident bytes of ``root`` and every process below it now, summed:
    the lab, the arm processes it forked (each in a session of its own, where
    an in-process engine runs) and whatever they started."""
    parent: dict[int, int] = {}
    rss: dict[int, int] = {}
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            with open(f"/proc/{entry.name}/stat", encoding="ascii", errors="replace") as f:
                fields = f.read().rsplit(")", 1)[1].split()
            parent[int(entry.name)] = int(fields[1])
            rss[int(entry.name)] = int(fields[21]) * os.sysconf("SC_PAGE_SIZE")
        except (OSError, ValueError, IndexError):
            continue
    below = {root}
    grew = True
    while grew:
        more = {pid for pid, ppid in parent.items() if ppid in below} - below
        grew = bool(more)
        below |= more
    return sum(rss.get(pid, 0) for pid in below)
