"""Keeping e-mail addresses private: what logs, exports and reports may show of them."""

from __future__ import annotations

import re

EMAIL = re.compile(r"[A-Za-z0-9._%+-]+@[A-Za-z0-9.-]+\.[A-Za-z]{2,}")


def mask_email(address: str) -> str:
    """``ada@example.com`` becomes ``a***@example.com``: the name hidden, the domain kept."""
    name, at, domain = address.partition("@")
    if not at or not name:
        return "***"
    return f"{name[0]}***@{domain}"


def redact(text: str) -> str:
    """``text`` with every e-mail address in it masked."""
    return EMAIL.sub(lambda match: mask_email(match.group()), text)
