"""``pipecat-summarizer inspect DB``: what a support engineer asks after a complaint.

* ``inspect DB``: the most recent calls; ``--user ID``: the calls of a caller.
* ``inspect DB --call ID``: the call's timeline of compactions (turn, reason, tokens and
  messages before and after, summary hash, what was dropped), the pinned facts' history,
  the messages still pending at the end and the final summary.
* ``inspect DB --call ID --message N``: the full text of a dropped message.
* ``inspect DB --search WORDS [--user ID] [--call ID]``: dropped messages by words, best
  first.

``DB`` is a SQLite file or a ``postgresql://`` DSN. Plain text by default, ``--json`` for
tools. The output quotes the conversation: it is for the operator's terminal, not for logs.

Safe to point at anything: the store is opened read-only (nothing is created, migrated or
switched to WAL; a file that is not a memory store, or one of another schema version, is
refused with exit status 2), caller text never reaches the terminal as control sequences
(shown escaped, ``\\x1b``, ``\\u202e``), and a DSN's password is never printed.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import re
import sys
import time
from dataclasses import asdict
from pathlib import Path
from typing import Any

from pipecat_summarizer.store import MemoryStore, StoreError, dsn_password, mask_dsn, open_store

PREVIEW = 72
#: ``--call ID``: the caller's (or, without one, the most recent) calls searched for other
#: sessions recorded under the same application id (a reconnect, a reused room name)
SESSIONS_LISTED = 200


def register(subparsers: Any) -> argparse.ArgumentParser:
    """Add the ``inspect`` subcommand to ``subparsers``; it runs :func:`run`."""
    p = subparsers.add_parser(
        "inspect",
        help="show what a memory store holds: calls, compactions, dropped messages, facts",
        description=(
            "Inspect a memory store (a SQLite file or a postgresql:// DSN): the calls of a "
            "caller, a call's compactions and pinned facts, a dropped message's full text, "
            "or a search of dropped messages by words. The store is opened read-only: "
            "nothing is created, migrated or changed, and a file that is not a memory "
            "store (or one of another schema version) is refused (exit status 2)."
        ),
    )
    p.add_argument("db", metavar="DB", help="SQLite file or postgresql:// DSN")
    p.add_argument("--user", metavar="ID", help="a caller: their calls (or limit --search)")
    p.add_argument("--call", metavar="ID", help="a call: its timeline (or limit --search)")
    p.add_argument(
        "--message", type=int, metavar="N", help="with --call: the full text of message N"
    )
    p.add_argument("--search", metavar="WORDS", help="dropped messages with these words")
    p.add_argument("--any", action="store_true", help="with --search: any of the words, not all")
    p.add_argument("--limit", type=int, default=20, help="most rows listed (default 20)")
    p.add_argument("--json", action="store_true", help="JSON output, for tools")
    p.set_defaults(run=run)
    return p


# -- secrets and terminal safety -----------------------------------------------------------

# C0 and C1 controls, DEL, and the Unicode format characters that reorder or hide text
# (bidi embeddings, overrides and isolates, marks, zero-width characters, line and
# paragraph separators): a terminal acts on them, so caller text shows them escaped.
_UNSAFE = re.compile(
    "[\x00-\x08\x0b-\x1f\x7f-\x9f\u061c\u200b-\u200f\u2028-\u202e\u2060-\u2069\ufeff\ufff9-\ufffb]"
)
_UNSAFE_LINE = re.compile(_UNSAFE.pattern[:-1] + "\n\t]")


def _escape(char: str) -> str:
    code = ord(char)
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"


def terminal_safe(text: str, *, multiline: bool = False) -> str:
    """``text`` with every character a terminal would act on shown escaped (``\\x1b``).

    Args:
        text: Caller text (a message, a summary, an id).
        multiline: Keep newlines and tabs (the full text of a message); otherwise they are
            escaped too, so an id cannot forge a line of the report.
    """
    pattern = _UNSAFE if multiline else _UNSAFE_LINE
    return pattern.sub(lambda m: _escape(m.group()), text)


# fields printed as blocks of text; every other string is one line of the report
_MULTILINE = frozenset({"content", "summary"})


def _safe(value: Any, key: str = "") -> Any:
    if isinstance(value, str):
        return terminal_safe(value, multiline=key in _MULTILINE)
    if isinstance(value, dict):
        return {k: _safe(v, k) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_safe(v, key) for v in value]
    return value


# characters JSON leaves raw with ensure_ascii=False that a terminal still acts on (C1
# controls such as CSI, bidi overrides): written as \uXXXX, the document decodes the same
_JSON_UNSAFE = re.compile(
    "[\x7f-\x9f\u061c\u200b-\u200f\u2028-\u202e\u2060-\u2069\ufeff\ufff9-\ufffb]"
)


def json_safe(document: str) -> str:
    """A JSON document with the characters above escaped; it decodes to the same value."""
    return _JSON_UNSAFE.sub(lambda m: f"\\u{ord(m.group()):04x}", document)


# -- running -------------------------------------------------------------------------------

# a target that starts with a scheme is a URL, for open_store to judge; anything else is a path
_URL_SCHEME = re.compile(r"[A-Za-z][A-Za-z0-9+.\-]*://")


def to_dict(record: Any) -> dict[str, Any]:
    """A store record (a dataclass) as a JSON-ready dict, for ``--json``."""
    data = asdict(record)
    if isinstance(data.get("facts"), tuple):
        data["facts"] = list(data["facts"])
    return data


def run(args: argparse.Namespace) -> int:
    """Run the command; 0 on success, 1 if nothing was found, 2 on a usage error or a
    target that is not a memory store this code can read."""
    if args.message is not None and not args.call:
        return _usage("--message needs --call")
    if args.limit < 1:
        return _usage("--limit must be at least 1")
    target = args.db
    secret = dsn_password(target)

    def fail(message: str) -> int:
        message = mask_dsn(message)
        if secret:
            # a driver's error may quote the password, or the part of it after a ":" or
            # "@" it took for the host or port, outside any URL
            pieces = [p for p in re.split(r"[:@]", secret) if len(p) >= 3]
            for piece in sorted({secret, *pieces}, key=len, reverse=True):
                message = message.replace(piece, "***")
        return _usage(message)

    # a URL is open_store's to judge (PostgreSQL's forms, or refused); a path must exist
    if not _URL_SCHEME.match(target) and not Path(target).is_file():
        # never create an empty database for a mistyped path
        return fail(f"no such SQLite file: {target}")
    try:
        # read-only: never create, migrate or switch the journal mode of what it is given
        store = open_store(target, read_only=True)
    except (StoreError, ValueError, TypeError) as e:
        return fail(str(e))
    try:
        return asyncio.run(_inspect(store, args))
    except StoreError as e:
        return fail(str(e))
    except Exception as e:  # a database error: name it, without a traceback
        return fail(f"{type(e).__name__}: {e}")


def _usage(message: str) -> int:
    print(f"pipecat-summarizer inspect: {terminal_safe(message)}", file=sys.stderr)
    return 2


async def _inspect(store: MemoryStore, args: argparse.Namespace) -> int:
    try:
        await store.open()
        if args.search is not None:
            data = await _search(store, args)
        elif args.message is not None:
            data = await _message(store, args.call, args.message)
        elif args.call:
            data = await _call(store, args.call)
        else:
            data = await _calls(store, args.user, args.limit)
    finally:
        await store.close()
    if data is None:
        what = (
            f"message {args.message} of call {args.call}"
            if args.message is not None
            else (f"call {args.call}")
        )
        print(f"pipecat-summarizer inspect: no {terminal_safe(what)} in the store", file=sys.stderr)
        return 1
    kind, payload = data
    if args.json:
        print(json_safe(json.dumps(payload, indent=2, ensure_ascii=False, default=str)))
    else:
        print(RENDER[kind](_safe(payload)))
    return 0


# -- gathering -----------------------------------------------------------------------------


async def _calls(store: MemoryStore, user: str | None, limit: int):
    calls = await store.calls(user, limit=limit)
    return "calls", {"user_id": user, "calls": [to_dict(c) for c in calls]}


async def _call(store: MemoryStore, call_id: str):
    call = await store.call(call_id)
    if call is None:
        return None
    # an application's id names its newest session: resolved once, so every read below is of
    # that session even if another starts meanwhile; the others under the id are named
    call_id = call.call_id
    label = call.label or call.call_id
    others = [
        {"call_id": c.call_id, "user_id": c.user_id, "started_at": c.started_at}
        for c in await store.calls(call.user_id, limit=SESSIONS_LISTED)
        if (c.label or c.call_id) == label and c.call_id != call_id
    ]
    messages = await store.messages(call_id)
    by_compaction: dict[int | None, list[dict]] = {}
    for m in messages:
        by_compaction.setdefault(m.compaction, []).append(to_dict(m))
    records = await store.compactions(call_id)
    row = to_dict(call)
    if call.ended_at is None:  # no final state (still running, or killed): count what is here
        row["messages_archived"] = len(messages)
        row["compactions"] = sum(1 for c in records if c.ok)
        row["turns"] = max([m.turn for m in messages] + [c.turn for c in records] + [0])
    compactions = []
    for c in records:
        item = to_dict(c)
        item["dropped"] = by_compaction.get(c.compaction, []) if c.ok else []
        compactions.append(item)
    return "call", {
        "call": row,
        "compactions": compactions,
        "not_summarized": by_compaction.get(None, []),
        "facts": [to_dict(f) for f in await store.fact_history(call_id=call_id)],
        "other_sessions": others,
    }


async def _message(store: MemoryStore, call_id: str, position: int):
    message = await store.message(call_id, position)
    return None if message is None else ("message", to_dict(message))


async def _search(store: MemoryStore, args: argparse.Namespace):
    hits = await store.search(
        args.search, user_id=args.user, call_id=args.call, limit=args.limit, any_word=args.any
    )
    return "search", {"query": args.search, "hits": [to_dict(h) for h in hits]}


# -- plain text ----------------------------------------------------------------------------


def _when(t: float | None) -> str:
    if t is None:
        return "-"
    return time.strftime("%Y-%m-%d %H:%M:%SZ", time.gmtime(t))


def _preview(text: str, width: int = PREVIEW) -> str:
    line = " ".join(str(text).split())
    return line if len(line) <= width else line[: width - 1] + "…"


def _ranges(positions: list[int]) -> str:
    out: list[list[int]] = []
    for p in sorted(positions):
        if out and out[-1][1] == p - 1:
            out[-1][1] = p
        else:
            out.append([p, p])
    return ", ".join(f"{a}" if a == b else f"{a}-{b}" for a, b in out)


def _call_line(c: dict) -> str:
    end = f"ended {_when(c['ended_at'])} ({c['ended_by']})" if c["ended_at"] else "no end"
    label = c.get("label")
    named = f"  call id {label}" if label and label != c["call_id"] else ""
    return (
        f"{c['call_id']}{named}  caller {c['user_id'] or '-'}  started {_when(c['started_at'])}  "
        f"{end}  turns {c['turns']}  compactions {c['compactions']}  "
        f"archived {c['messages_archived']}" + ("  resumed" if c.get("resumed") else "")
    )


def _render_calls(data: dict) -> str:
    head = f"calls of {data['user_id']}" if data["user_id"] else "most recent calls"
    if not data["calls"]:
        return f"{head}: none"
    return "\n".join([f"{head}:", *("  " + _call_line(c) for c in data["calls"])])


def _shown(m: dict) -> str:
    """A row's text; a row archived without text says what it stands for (a resumed call's
    reference to where a restored message is archived, or our placeholder of a cleared result)."""
    if m["content"]:
        return m["content"]
    try:
        form = json.loads(m.get("message_json") or "{}")
    except ValueError:
        return m["content"]
    origin = form.get("restored_from") if isinstance(form, dict) else None
    if isinstance(origin, list) and len(origin) == 2:
        # decoded here, after the payload was made terminal-safe: JSON keeps a control
        # character as the ASCII "\u001b", which decoding turns back into a raw escape
        call, position = (terminal_safe(str(part)) for part in origin)
        return f"(restored: archived as call {call} message {position})"
    if isinstance(form, dict) and form.get("role") == "tool" and form.get("content"):
        # the only tool row archived without its text: our placeholder (recall skips it)
        return "(placeholder of a cleared tool result; the original is archived as cleared)"
    return m["content"]


def _message_line(m: dict) -> str:
    return f"[{m['position']}] {m['role']}: {_preview(_shown(m))}"


def render_call(data: dict) -> str:
    """The plain-text timeline of one call."""
    c = data["call"]
    lines = [f"call {_call_line(c)}"]
    for o in data.get("other_sessions", ()):
        lines.append(
            f"  another session under this call id: {o['call_id']}  caller "
            f"{o['user_id'] or '-'}  started {_when(o['started_at'])}"
        )
    lines += ["", "compactions:"]
    if not data["compactions"]:
        lines.append("  none")
    for x in data["compactions"]:
        if not x["ok"]:
            lines.append(
                f"  attempt {x['attempt']}  turn {x['turn']}  {x['reason']}  FAILED "
                f"({x['error']})  after {x['latency_s']:.2f}s"
            )
            continue
        dropped = x["dropped"]
        lines.append(
            f"  #{x['compaction']}  turn {x['turn']}  {x['reason']}  {_when(x['at'])}  "
            f"tokens {x['tokens_before']} -> {x['tokens_after']}  messages "
            f"{x['messages_before']} -> {x['messages_after']}  summary sha256 "
            f"{x['summary_sha256'][:12]}  {x['latency_s']:.2f}s  model {x['model'] or '-'}"
        )
        positions = [m["position"] for m in dropped]
        lines.append(
            f"      dropped {len(dropped)} messages"
            + (f" [{_ranges(positions)}]:" if dropped else "")
        )
        lines += [
            f"        {_message_line(m)}"
            + (f"  (evicted at turn {m['evicted_turn']})" if m.get("evicted_turn") else "")
            for m in dropped
        ]
    if data["not_summarized"]:
        lines += ["", "evicted or replaced, never summarized:"]
        lines += [
            f"  {_message_line(m)}  ({m['removed_by']} at turn {m['turn']})"
            for m in data["not_summarized"]
        ]
    lines += ["", "pinned facts:"]
    if not data["facts"]:
        lines.append("  none")
    for f in data["facts"]:
        # summary bullets are keyed by their own text ("text:..."): not worth printing twice
        key = "" if f["key"].startswith("text:") else f"{f['key']} "
        lines.append(
            f"  turn {f['turn']}  {f['action']:<9} {key}({f['fact_kind']}, by "
            f"{f['actor']}/{f['source']}): {_preview(f['text'], 60)}"
        )
    if c.get("summary"):
        lines += ["", "final summary:", *("  " + line for line in c["summary"].splitlines())]
    return "\n".join(lines)


def _render_message(m: dict) -> str:
    state = m["removed_by"] + (
        f" by compaction #{m['compaction']}" if m["compaction"] is not None else ""
    )
    if m.get("evicted_turn") is not None and m["removed_by"] != "evicted":
        state = f"evicted at turn {m['evicted_turn']}, then {state}"

    ids = ", ".join(m["tool_call_ids"])
    return "\n".join(
        [
            f"call {m['call_id']}  message {m['position']}  {m['role']}  turn {m['turn']}  "
            f"{_when(m['at'])}  {state}" + (f"  tool calls {ids}" if ids else ""),
            "",
            _shown(m),
        ]
    )


def _render_search(data: dict) -> str:
    if not data["hits"]:
        return f"no dropped message matches {data['query']!r}"
    return "\n".join(
        f"{h['call_id']} [{h['position']}] turn {h['turn']} {h['role']} "
        f"score {h['score']:.3f} ({h['removed_by']}): {_preview(h['content'])}"
        for h in data["hits"]
    )


RENDER = {
    "calls": _render_calls,
    "call": render_call,
    "message": _render_message,
    "search": _render_search,
}
