"""JSON as every file the lab saves holds it: strict, so any reader can
parse it. JSON has no NaN or Infinity (Python writes them by default, and
most other readers refuse the file); a figure that came out non-finite is
saved as null, which in a row already means "not applicable"."""

from __future__ import annotations

import json
import math
from typing import Any, Mapping


def strict_json(value: Any) -> Any:
    """``value`` with every NaN and infinity replaced by None, recursively
    through mappings, lists and tuples."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, Mapping):
        return {str(k): strict_json(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [strict_json(v) for v in value]
    return value


def dumps(value: Any, **kw: Any) -> str:
    """Strict JSON text (see :func:`strict_json`); anything not JSON becomes
    its str."""
    kw.setdefault("default", str)
    try:
        # the common case has no non-finite number: no copy of the data
        return json.dumps(value, allow_nan=False, **kw)
    except ValueError:
        return json.dumps(strict_json(value), allow_nan=False, **kw)
