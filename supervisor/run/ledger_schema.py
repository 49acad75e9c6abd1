"""What a ledger record must hold, by kind: every reader gets only records that passed this check.

The agent can write to the ledger file, so a record is data to judge, not to trust: a record of
a known kind whose fields a reader uses are missing or of the wrong type is skipped with a
warning instead of reaching a ``record["ref"]`` somewhere and ending in a traceback. Kinds this
version does not know (written by a newer paella, or by another part of it) pass with the
generic check only (``t`` and ``kind`` are strings), and extra fields are always allowed.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from typing import Any

Check = Callable[[object], bool]

_OBJECT_ID = re.compile(r"^[0-9a-f]{40}([0-9a-f]{24})?$")
# A ref paella wrote: under refs/paella/, no component git would refuse or that climbs out.
_PAELLA_REF = re.compile(r"^refs/paella/[A-Za-z0-9._/-]+$")


def _int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and abs(value) < 2**63


def _count(value: object) -> bool:
    return _int(value) and value >= 0  # type: ignore[operator]


def _number(value: object) -> bool:
    return (isinstance(value, int | float) and not isinstance(value, bool)) and (abs(value) < 1e300)


def _str(value: object) -> bool:
    return isinstance(value, str)


def _bool(value: object) -> bool:
    return isinstance(value, bool)


def _dict(value: object) -> bool:
    return isinstance(value, dict)


def _object_id(value: object) -> bool:
    return isinstance(value, str) and _OBJECT_ID.match(value) is not None


def _paella_ref(value: object) -> bool:
    return (
        isinstance(value, str)
        and _PAELLA_REF.match(value) is not None
        and ".." not in value
        and "//" not in value
    )


def _optional(check: Check) -> Check:
    return lambda value: value is None or check(value)


def _list_of(check: Check) -> Check:
    return lambda value: isinstance(value, list) and all(check(item) for item in value)


def _contract_info(value: object) -> bool:
    return value is None or (
        isinstance(value, dict)
        and isinstance(value.get("sha256"), str)
        and isinstance(value.get("path", ""), str)
    )


def _episode(value: object) -> bool:
    return value is None or value == "manual" or _count(value)


_STRS = _list_of(_str)

# field -> (check, required). Required: what a reader indexes directly or cannot do without.
_SNAPSHOT: dict[str, tuple[Check, bool]] = {
    "n": (_count, True),
    "ref": (_paella_ref, True),
    "commit": (_object_id, True),
    "tree": (_object_id, True),
    "head": (_optional(_object_id), False),
    "branch": (_optional(_str), False),
    "gates_green": (_STRS, False),
    "label": (_str, False),
    "reason": (_str, False),
    "skipped_files": (_list_of(_dict), False),
    "uncovered": (_STRS, False),
}

SCHEMAS: Mapping[str, Mapping[str, tuple[Check, bool]]] = {
    "run-started": {
        "run_id": (_str, True),
        "manual": (_bool, False),
        "reason": (_str, False),
        "contract": (_contract_info, False),
        "head": (_optional(_object_id), False),
        "branch": (_optional(_str), False),
        "paella_pid": (_optional(_int), False),
    },
    "run-tree": {"tree": (_object_id, True)},
    "agent-started": {
        "attempt": (_count, True),
        "pid": (_int, True),
        "create_time": (_optional(_number), False),
        "argv": (_STRS, False),
        "resumed": (_bool, False),
        "tty": (_bool, False),
    },
    "agent-session": {"attempt": (_count, False), "session_id": (_str, True)},
    "agent-stats": {
        "attempt": (_count, True),
        "cpu_percent": (_optional(_number), False),
        "rss_bytes": (_optional(_int), False),
        "descendants": (_optional(_int), False),
        "uptime_s": (_optional(_number), False),
        "usage": (_optional(_dict), False),
    },
    "agent-exited": {
        "attempt": (_count, True),
        "exit_code": (_optional(_int), False),
        "signal": (_optional(_int), False),
        "tail": (_STRS, False),
        "leftovers": (_STRS, False),
        "stopped_by_user": (_bool, False),
        "false_success": (_optional(_str), False),
        "exit_meaning": (_optional(_str), False),
        "usage": (_optional(_dict), False),
    },
    # Gate and evaluation trees are only compared, never handed to git: any string will do.
    "evaluation-started": {
        "tree": (_str, True),
        "reason": (_str, False),
        "gates": (_STRS, False),
        "frozen": (_STRS, False),
    },
    "gate-started": {"gate": (_str, True), "tree": (_str, True)},
    "gate-finished": {
        "gate": (_str, True),
        "status": (_str, True),
        "tree": (_str, True),
        "duration_s": (_optional(_number), False),
        "exit_code": (_optional(_int), False),
        "attempts": (_optional(_count), False),
        "log": (_optional(_str), False),
        "cached": (_bool, False),
        "stale": (_bool, False),
        "message": (_str, False),
    },
    "evaluation-finished": {
        "tree": (_str, True),
        "complete_episodes": (_count, True),
        "stale": (_bool, False),
        "green": (_STRS, False),
        "red": (_STRS, False),
        "frozen": (_STRS, False),
    },
    # Protected files at run start vs now: a person's decision (judge/frozen.py).
    "protected-accepted": {
        "ref": (_paella_ref, True),
        "commit": (_object_id, True),
        "tree": (_object_id, True),
        "paths": (_STRS, False),
        "by": (_str, False),
    },
    "protected-reverted": {
        "paths": (_STRS, False),
        "salvage": (_count, False),
        "salvage_ref": (_paella_ref, False),
        "by": (_str, False),
    },
    "checkpoint": {**_SNAPSHOT, "episode": (_episode, False)},
    "salvage": _SNAPSHOT,
    "drift": {
        "drift": (_str, True),
        "message": (_str, True),
        "gate": (_optional(_str), False),
        "path": (_optional(_str), False),
    },
    "watch-paused": {"reason": (_str, False)},
    "retry-scheduled": {
        "attempt": (_count, True),
        "failures": (_count, False),
        "wait_s": (_number, False),
        "resume_at": (_number, False),
        "reason": (_str, False),
    },
    "recovery-needed": {
        "ending": (_str, True),
        "how": (_str, False),
        "attempt": (_optional(_count), False),
        "tail": (_STRS, False),
        "base": (_optional(_count), False),
        "regressions": (_STRS, False),
        "changed_files": (_STRS, False),
        "default": (_str, False),
    },
    "recovery-chosen": {
        "choice": (_str, True),
        "target": (_optional(_str), False),
        "by": (_str, False),
    },
    "handoff-written": {"path": (_str, True), "size": (_count, False)},
    "run-done": {"tree": (_str, True), "gates": (_STRS, False)},
    "run-stopped": {"reason": (_str, False)},
    "rollback-refused": {
        "target": (_str, True),
        "salvage_ref": (_paella_ref, False),
        "in_the_way": (_STRS, False),
    },
    "rollback-intent": {
        "id": (_str, True),
        "target": (_str, True),
        "target_ref": (_paella_ref, True),
        "target_tree": (_object_id, False),
        "salvage": (_count, True),
        "salvage_ref": (_paella_ref, True),
        "from_head": (_optional(_object_id), False),
        "from_branch": (_optional(_str), False),
        "to_head": (_optional(_object_id), False),
        "to_branch": (_optional(_str), False),
    },
    "rollback-done": {
        "id": (_str, True),
        "target": (_str, False),
        "target_ref": (_paella_ref, True),
        "tree": (_object_id, False),
        "salvage": (_count, False),
        "salvage_ref": (_paella_ref, False),
        "changed_files": (_count, False),
        "notes": (_STRS, False),
    },
    "rollback-failed": {
        "id": (_str, True),
        "step": (_str, False),
        "error": (_str, False),
        "salvage_ref": (_paella_ref, False),
    },
    "leftovers": {"who": (_str, True), "processes": (_STRS, True)},
}


def problem(record: Mapping[str, Any]) -> str | None:
    """What is wrong with ``record`` (``field 'ref' is missing``), or None when it is usable."""
    kind = record.get("kind")
    if not isinstance(kind, str) or not kind:
        return "it has no kind"
    if not isinstance(record.get("t"), str):
        return f"its {kind!r} record has no time (t)"
    for name, (check, required) in SCHEMAS.get(kind, {}).items():
        if name not in record:
            if required:
                return f"its {kind!r} record lacks the field {name!r}"
            continue
        if not check(record[name]):
            return f"its {kind!r} record has an unusable {name!r}: {_short(record[name])}"
    return None


def _short(value: object) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."
