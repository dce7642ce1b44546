"""A DSN's password never reaches a log, an error, a repr or the terminal.

One masking rule for the store's repr and errors and for ``inspect``'s output.
"""

from __future__ import annotations

import re

_URL = re.compile(r"(?P<scheme>[A-Za-z][A-Za-z0-9+.\-]*://)(?P<rest>\S*)")
_PASSWORD_PARAM = re.compile(r"(?i)\b(password|passwd|pwd)=[^&\s]*")


def mask_dsn(text: str) -> str:
    """``text`` with the password of every URL in it replaced by ``***``.

    The user info runs to the last ``@`` of the URL, so a password holding ``:`` or
    ``@`` is masked whole (over-masking a query is harmless; printing a secret is not);
    a ``password=`` parameter is masked too. A SQLite path comes back unchanged.

    Args:
        text: A DSN, or a message that may quote one.

    Returns:
        The text, safe to print or log.
    """

    def one(match: re.Match[str]) -> str:
        rest = match["rest"]
        at = rest.rfind("@")
        if at > 0 and ":" in rest[:at]:
            user = rest[: rest.index(":")]
            rest = f"{user}:***{rest[at:]}"
        return match["scheme"] + _PASSWORD_PARAM.sub(r"\1=***", rest)

    return _PASSWORD_PARAM.sub(r"\1=***", _URL.sub(one, text))


def dsn_password(target: str) -> str | None:
    """The password in ``target``'s user part, if it is a URL with one (to mask it where
    a driver's error quotes it outside any URL)."""
    match = _URL.match(target)
    if match is None:
        return None
    rest = match["rest"]
    at = rest.rfind("@")
    if at <= 0 or ":" not in rest[:at]:
        return None
    return rest[rest.index(":") + 1 : at] or None
