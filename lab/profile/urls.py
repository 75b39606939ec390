"""An attached arm's ``url`` checked with the profile, so `lab check`
refuses what the arm would refuse only when it attaches: a scheme other
than http(s), a host other than loopback without ``allow_remote``,
credentials, a path (lab.kit.server.attach.check_url says which)."""

from __future__ import annotations

from typing import Any, Mapping, Sequence

from lab.api import Option


def url_refusal(declared: Sequence[Option], options: Mapping[str, Any]) -> tuple[str, str] | None:
    """``(option, why)`` when the arm's ``url`` cannot be attached to; None
    when it can, or when its backend attaches to no URL."""
    from lab.kit.server.attach import AttachError, check_url

    names = {o.name for o in declared}
    url = options.get("url")
    if not {"url", "allow_remote"} <= names or url is None:
        return None
    try:
        check_url(str(url), bool(options.get("allow_remote")))
    except AttachError as exc:
        return ("url", str(exc))
    return None
