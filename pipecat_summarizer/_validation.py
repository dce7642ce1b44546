"""Type checks for numeric configuration fields, so a bad value fails at construction.

NaN compares false with everything, so range checks written as ``if x < 0: raise`` let it
through; infinity passes most of them too; strings and booleans fail later, far from the
cause, or not at all (``True`` is an ``int``). These checks run first and name the field.
"""

from __future__ import annotations

import dataclasses
import math
import numbers
import re
import typing
from typing import Any

_NUMERIC_WORDS = re.compile(r"\b(int|float)\b")

#: The largest integer a numeric field takes (a signed 64-bit integer, as the databases).
LARGEST_INTEGER = 2**63 - 1


def shown(value: Any) -> str:
    """``value`` for an error message: its repr, or for an integer past
    :data:`LARGEST_INTEGER` its size (Python refuses to write an int of more than 4,300
    digits, and a message of thousands is no use either)."""
    if isinstance(value, numbers.Integral) and abs(int(value)) > LARGEST_INTEGER:
        return f"an integer of {int(value).bit_length()} bits"
    return repr(value)


def check_number(
    name: str,
    value: Any,
    *,
    integer: bool = False,
    optional: bool = False,
) -> None:
    """Reject a value that is not a finite number of the right type.

    Args:
        name: The field's name, for the message.
        value: The value to check.
        integer: Require an integer (a float such as ``3.0`` is rejected too).
        optional: Accept ``None``.

    Raises:
        TypeError: If the value is a bool, a string or any other non-number, or a
            non-integer where an integer is required.
        ValueError: If the value is NaN or infinite (checked before the integer type, so
            ``nan`` in an integer field reads as what it is), or an integer past
            :data:`LARGEST_INTEGER` in magnitude.
    """
    if value is None:
        if optional:
            return
        raise TypeError(f"{name} must be a number, got None")
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        kind = "an integer" if integer else "a number"
        raise TypeError(f"{name} must be {kind}, got {type(value).__name__} {value!r:.40}")
    if isinstance(value, numbers.Integral):
        # math.isfinite overflows on an int past a float, as would the field's later
        # arithmetic, and neither database takes one past a signed 64-bit integer
        if not -LARGEST_INTEGER <= int(value) <= LARGEST_INTEGER:
            raise ValueError(f"{name} must be at most 2**63 - 1 in magnitude, got {shown(value)}")
    elif not math.isfinite(value):
        raise ValueError(f"{name} must be a finite number, got {value!r}")
    if integer and not isinstance(value, numbers.Integral):
        raise TypeError(f"{name} must be an integer, got {type(value).__name__} {value!r:.40}")


def _numeric_kind(annotation: Any) -> tuple[str, bool] | None:
    """``("int" | "float", optional)`` for a numeric annotation, else ``None``.

    Works on resolved types and on the strings ``from __future__ import annotations``
    leaves behind (Pipecat's configs have forward references that cannot be resolved).
    """
    if isinstance(annotation, str):
        words = set(_NUMERIC_WORDS.findall(annotation))
        # "int | None", "Optional[float]"; a union with other types (str, a class) is not
        # a numeric field and is left to its own validation
        rest = re.sub(r"\b(int|float|None|Optional)\b|[\[\]|, ]", "", annotation)
        if not words or rest:
            return None
        kind = "float" if "float" in words else "int"
        return kind, "None" in annotation or "Optional" in annotation
    args = typing.get_args(annotation)
    if args:  # Optional[...] / X | None
        members = [a for a in args if a is not type(None)]
        if not members or any(a not in (int, float) for a in members):
            return None
        return ("float" if float in members else "int"), len(members) < len(args)
    if annotation is int:
        return "int", False
    if annotation is float:
        return "float", False
    return None


def _annotations(cls: type) -> dict[str, Any]:
    try:
        return typing.get_type_hints(cls)
    except Exception:  # unresolvable forward references: fall back to the raw strings
        return {f.name: f.type for f in dataclasses.fields(cls)}


def validate_numeric_fields(obj: Any, prefix: str = "", optional: tuple[str, ...] = ()) -> None:
    """Check every ``int``/``float`` field of a dataclass instance by its annotation.

    Fields added later are covered without touching this function.

    Args:
        obj: A dataclass instance.
        prefix: Prepended to field names in messages (for example ``"summary_config."``).
        optional: Fields that also accept ``None`` whatever their annotation says.

    Raises:
        TypeError: If a field holds a non-number (a string, a bool) or a float where an
            integer is required.
        ValueError: If a field holds NaN or infinity.
    """
    hints = _annotations(type(obj))
    for field in dataclasses.fields(obj):
        kind = _numeric_kind(hints.get(field.name, field.type))
        if kind is None:
            continue
        integer = kind[0] == "int"
        check_number(
            f"{prefix}{field.name}",
            getattr(obj, field.name),
            integer=integer,
            optional=kind[1] or field.name in optional,
        )
