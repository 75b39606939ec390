"""The one long-lived thread that owns a session's MLX work.

MLX streams belong to the thread that created them, so every MLX call of a
backend (load, generate, close) runs here, on a stream created here. The
runner's worker thread only hands work over and waits."""

from __future__ import annotations

import os
import threading
from concurrent.futures import Future
from queue import Queue
from typing import Any, Callable, TypeVar

T = TypeVar("T")

_STOP = object()


class EngineThread:
    def __init__(self, name: str) -> None:
        self.name = name
        self.stream: Any = None
        self._jobs: Queue[Any] = Queue()
        self._thread = threading.Thread(target=self._loop, name=f"mlx-{name}", daemon=True)
        self._thread.start()

    def _loop(self) -> None:
        import mlx.core as mx

        self.stream = mx.new_stream(mx.default_device())
        while True:
            job = self._jobs.get()
            if job is _STOP:
                return
            fn, fut = job
            if not fut.set_running_or_notify_cancel():
                continue
            try:
                with mx.stream(self.stream):
                    fut.set_result(fn())
            except BaseException as exc:  # noqa: BLE001 - handed to the caller
                fut.set_exception(exc)

    def call(self, fn: Callable[[], T]) -> T:
        """Run ``fn`` on the engine thread and return its result (or raise
        its exception) in the caller's thread."""
        if threading.current_thread() is self._thread:
            return fn()
        fut: Future[T] = Future()
        self._jobs.put((fn, fut))
        return fut.result()

    def close(self) -> None:
        if self._thread.is_alive():
            self._jobs.put(_STOP)
            self._thread.join(timeout=10)


def memory() -> dict[str, int]:
    """MLX's own allocator figures (bytes) and this process's RSS."""
    import mlx.core as mx
    import psutil

    return {
        "mlx_active_bytes": int(mx.get_active_memory()),
        "mlx_cache_bytes": int(mx.get_cache_memory()),
        "mlx_peak_bytes": int(mx.get_peak_memory()),
        "rss_bytes": int(psutil.Process(os.getpid()).memory_info().rss),
    }


def set_wired_limit() -> int | None:
    """On Apple Silicon, wire the recommended working set as mlx-lm does so
    weights are not paged out mid-generation; returns the old limit to
    restore, None where the device has no such notion (CPU)."""
    import mlx.core as mx

    info = mx.device_info() if hasattr(mx, "device_info") else {}
    size = info.get("max_recommended_working_set_size")
    if not size:
        return None
    return int(mx.set_wired_limit(int(size)))


def restore_wired_limit(old: int | None) -> None:
    if old is None:
        return
    import mlx.core as mx

    mx.synchronize()
    mx.set_wired_limit(old)
