"""STYLE.md: one status routine. Only jssync/base/status.py reads a message's Status header.

Every other module hands a candidate status to ``_status.classify`` (after the cheap inline
``"Status" not in h`` pre-check on hot paths) and looks at the :class:`Status` it returns.
"""

from __future__ import annotations

import pathlib
import re

import pytest

pytestmark = pytest.mark.timeout(10)

PKG = pathlib.Path(__file__).resolve().parents[3] / "jssync"

# Reading a status or its companion headers out of a header mapping:
# h.get("Status"), h["Status"], h.get("Description"), h.get(Header.STATUS), ...
_READ = re.compile(
    r"""(\.get\(\s*|\[\s*)(["'](Status|Description|Nats-Last-Consumer|Nats-Last-Stream|Nats-Consumer-Stalled)["']"""
    r"""|Header\.(STATUS|DESCRIPTION|LAST_CONSUMER|LAST_STREAM|CONSUMER_STALLED)|HDR_STATUS|HDR_DESCRIPTION)"""
)
# Comparing a raw status string: == "503", in ("404", "408"), ...
_RAW_CODE = re.compile(r"""(==|!=|\bin\b)\s*\(?\s*["'][1-5]\d\d["']""")


def _offenders(pattern: re.Pattern[str]) -> list[str]:
    out = []
    for path in sorted(PKG.rglob("*.py")):
        if path.name == "status.py":
            continue
        for n, line in enumerate(path.read_text().splitlines(), 1):
            code = line.split("#", 1)[0]
            if pattern.search(code):
                out.append(f"{path.name}:{n}: {line.strip()}")
    return out


def test_only_status_module_reads_status_headers():
    # writing a parsed header block (out["Status"] = code) is not reading one
    offenders = [o for o in _offenders(_READ) if not re.search(r"""\[["']\w+["']\]\s*=[^=]""", o)]
    assert offenders == [], "status headers read outside jssync/base/status.py (use _status.classify):\n" + "\n".join(
        offenders)


def test_no_inline_status_code_strings():
    offenders = _offenders(_RAW_CODE)
    assert offenders == [], "status codes compared as strings outside jssync/base/status.py:\n" + "\n".join(offenders)


def test_the_patterns_catch_the_old_forms():
    for line in ('status = hdrs.get("Status")', 'if hdrs["Status"] == "100":', "h.get('Description', '')",
                 'last = hdrs.get("Nats-Last-Consumer")', "desc = h.get(Header.DESCRIPTION)"):
        assert _READ.search(line), line
    for line in ('if status == "503":', 'if status in ("404", "408"):', "x != '204'"):
        assert _RAW_CODE.search(line), line
    assert not _READ.search('if h is None or msg.data or "Status" not in h:')
