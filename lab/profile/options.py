"""Plugin options checked against what the plugin declares: ``type``,
``choices``, ``required``, an inclusive ``min``/``max`` (an int without them
held to 32 bits), a list's ``item_type``, and ``requires`` (value -> the
options it needs)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Mapping, Sequence

from lab.base.limits import INT32, option_range, out_of_range
from lab.profile.errors import KeyPath, Source, shown
from lab.profile.read import closest, got, typed

if TYPE_CHECKING:
    from lab.api import Option

_SCALARS: tuple[type, ...] = (str, int, float, bool)


def check_options(
    src: Source, values: Mapping[str, Any], declared: Sequence[Option], key: KeyPath, owner: str
) -> dict[str, list[Any]]:
    """Validate option values; return each option's list of sweep values (a
    list given for a non-list option sweeps it)."""
    by_name = {o.name: o for o in declared}
    swept: dict[str, list[Any]] = {}
    for k, v in values.items():
        if k not in by_name:
            hint = closest(k, list(by_name))
            allowed = ", ".join(sorted(by_name)) or "none"
            also = f"; did you mean {hint!r}?" if hint else f"; it accepts: {allowed}"
            raise src.error([*key, k], f"{owner} has no option {shown(k)}{also}")
        opt = by_name[k]
        vals = v if isinstance(v, list) and opt.type is not list else [v]
        if not vals:
            raise src.error([*key, k], "an empty list sweeps nothing")
        for one in vals:
            check_value(src, opt, one, [*key, k])
        swept[k] = [float(x) if opt.type is float else x for x in vals]
    for opt in declared:
        if opt.required and opt.name not in values:
            raise src.error([*key, opt.name], f"{owner} requires option {opt.name!r}" + _help(opt))
    return swept


def check_value(src: Source, opt: Option, value: Any, key: KeyPath) -> None:
    types: tuple[type, ...] = (opt.type,) if opt.type is not float else (float, int)
    typed(src, value, types, key)
    if isinstance(value, str):
        _check_text(src, opt, value, key)
    elif opt.type in (int, float):
        rng = option_range(opt) or (INT32 if opt.type is int else None)
        why = out_of_range(value, rng)
        if why:
            raise src.error(key, why)
    elif opt.type is list:
        item_type = opt.item_type
        allowed: tuple[type, ...] = (item_type,) if isinstance(item_type, type) else _SCALARS
        for i, item in enumerate(value):
            ok = isinstance(item, allowed) and not (isinstance(item, bool) and bool not in allowed)
            if not ok:
                want = " or ".join(t.__name__ for t in allowed)
                raise src.error([*key, i], f"elements are {want}, got {got(item)}")
            if isinstance(item, str) and "\x00" in item:
                raise src.error([*key, i], "the value holds a NUL character")
    if opt.choices is not None and value not in opt.choices:
        raise src.error(key, f"{shown(value)} is not one of {list(opt.choices)}")


def _check_text(src: Source, opt: Option, value: str, key: KeyPath) -> None:
    if "\x00" in value:
        raise src.error(key, "the value holds a NUL character")
    if not value.strip() and not (opt.choices and value in opt.choices):
        raise src.error(key, "an empty string sets nothing; leave the option out for its default")


def check_requires(src: Source, options: Mapping[str, Any], declared: Sequence[Option], key: KeyPath, owner: str) -> None:
    """Options one value of another needs (after sweeps: the value may be swept)."""
    for opt in declared:
        needs = opt.requires
        if not needs:
            continue
        value = options.get(opt.name, opt.default)
        try:
            wanted = dict(needs).get(value, ())
        except (TypeError, ValueError):
            continue  # an unhashable value cannot be a key of the declaration
        for other in wanted:
            if options.get(other) is None:
                where = [*key, opt.name] if opt.name in options else list(key)
                declared_other = next((o for o in declared if o.name == other), None)
                raise src.error(
                    where,
                    f"{owner}: {opt.name} = {shown(value)} needs option {other!r}"
                    + (_help(declared_other) if declared_other else ""),
                )


def _help(opt: Option) -> str:
    return f" ({opt.help})" if opt.help else ""
