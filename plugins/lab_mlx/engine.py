"""The one long-lived thread that owns a session's MLX work.

MLX streams belong to the thread that created them, so every MLX call of a
backend (load, generate, close) runs here, on a stream created here. The
runner's worker thread only hands work over and waits."""

from __future__ import annotations

import os
import threading
from concurrent.futures import Future
from concurrent.futures import TimeoutError as FutureTimeout
from queue import Queue
from typing import Any, Callable, TypeVar

T = TypeVar("T")

_STOP = object()


class EngineThread:
    def __init__(self, name: str) -> None:
        self.name = name
        self.stream: Any = None
        # why the thread could not start MLX: every call raises it
        self._failed: BaseException | None = None
        self._jobs: Queue[Any] = Queue()
        self._thread = threading.Thread(target=self._loop, name=f"mlx-{name}", daemon=True)
        self._thread.start()

    def _loop(self) -> None:
        try:
            import mlx.core as mx

            self.stream = mx.new_stream(mx.default_device())
        except BaseException as exc:  # noqa: BLE001 - handed to every caller, never a silent dead thread
            self._failed = exc
            return
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
        # a thread that died (MLX would not import) never answers: waiting
        # for it would hold the run, and its clean-up, forever
        while True:
            try:
                return fut.result(timeout=0.2)
            except FutureTimeout:
                if not self._thread.is_alive() and not fut.done():
                    if self._failed is not None:
                        raise self._failed from None
                    raise RuntimeError(f"the MLX engine thread of {self.name} has ended") from None

    @property
    def started(self) -> bool:
        """Whether MLX imported and the thread took work (False once it
        failed to start)."""
        return self._failed is None

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
