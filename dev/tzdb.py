#!/usr/bin/env python3
"""The zone table for TZ <zone name> (`make tzdb`): reads the PyPI tzdata
package (pinned below) and writes it, pre-parsed, into src/time/tzdb.rs and
between the `-- BEGIN tzdb` / `-- END tzdb` lines of functions/ratelimit.lua.

Each IANA name (canonical zones and links) maps to its TZif file's footer,
the POSIX TZ rule that governs after its last listed transition: a fixed
offset (`IST-5:30`), or a standard and a daylight offset with the two
yearly changes (`CET-1CEST,M3.5.0,M10.5.0/3`). A zone is kept only when that
rule alone gives every offset change from VALID_FROM on (its TZif file lists
none after VALID_FROM that the rule does not), so the table is exact from
then on, under the zone's rules as of this tzdata version; names whose
footer is empty or does not yet govern are left out (and printed).

Usage: python3 -m pip install tzdata==2026.6 && python3 dev/tzdb.py
(or `make tzdb`, which installs the pinned tzdata into a venv under target/).
"""

import datetime
import importlib.resources
import os
import re
import struct
import subprocess
import sys

TZDATA_PIN = "2026.6"
# The instant from which every kept zone's rule must be exact (UTC).
VALID_FROM = datetime.datetime(2026, 12, 1, tzinfo=datetime.timezone.utc)

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
RUST_OUT = os.path.join(ROOT, "src", "time", "tzdb.rs")
LUA_FILE = os.path.join(ROOT, "functions", "ratelimit.lua")
LUA_BEGIN = "-- BEGIN tzdb"
LUA_END = "-- END tzdb"


def parse_posix(rule):
    """A POSIX TZ string -> (std_east_ms, None) for a fixed offset, or
    (std_east_ms, (dst_east_ms, start, end)) with start/end as (month,
    week, weekday, local_time_ms). Refuses forms tzdata does not use
    (Jn, n, DST without rules), so a future tzdata that does fails here."""
    pos = 0

    def name():
        nonlocal pos
        if rule[pos] == "<":
            close = rule.index(">", pos)
            pos = close + 1
        else:
            m = re.compile(r"[A-Za-z]{3,}").match(rule, pos)
            if not m:
                raise ValueError(f"bad zone abbreviation in {rule!r}")
            pos = m.end()

    def hms(signed):
        nonlocal pos
        pattern = r"([+-]?)(\d{1,3})(?::(\d{2}))?(?::(\d{2}))?"
        m = re.compile(pattern).match(rule, pos)
        if not m:
            raise ValueError(f"bad time in {rule!r}")
        pos = m.end()
        sign = -1 if m.group(1) == "-" else 1
        if m.group(1) and not signed:
            raise ValueError(f"unexpected sign in {rule!r}")
        h, mi, s = int(m.group(2)), int(m.group(3) or 0), int(m.group(4) or 0)
        return sign * ((h * 60 + mi) * 60 + s) * 1000

    def change():
        nonlocal pos
        m = re.compile(r"M(\d{1,2})\.(\d)\.(\d)").match(rule, pos)
        if not m:
            raise ValueError(f"only Mm.w.d rules are supported: {rule!r}")
        pos = m.end()
        month, week, day = int(m.group(1)), int(m.group(2)), int(m.group(3))
        assert 1 <= month <= 12 and 1 <= week <= 5 and 0 <= day <= 6, rule
        time = 2 * 3600 * 1000
        if pos < len(rule) and rule[pos] == "/":
            pos += 1
            time = hms(True)
        return (month, week, day, time)

    name()
    std = -hms(True)  # POSIX counts west as positive
    if pos == len(rule):
        return std, None
    name()
    dst = std + 3600 * 1000
    if rule[pos] != ",":
        dst = -hms(True)
    if pos == len(rule) or rule[pos] != ",":
        raise ValueError(f"DST without rules: {rule!r}")
    pos += 1
    start = change()
    if rule[pos] != ",":
        raise ValueError(f"bad rule {rule!r}")
    pos += 1
    end = change()
    if pos != len(rule):
        raise ValueError(f"trailing text in {rule!r}")
    return std, (dst, start, end)


def days_from_civil(y, m, d):
    return (datetime.date(y, m, d) - datetime.date(1970, 1, 1)).days


def change_day(year, month, week, weekday):
    """Days since the epoch of the week-th weekday of month (5: last)."""
    first = days_from_civil(year, month, 1)
    first_dow = (first + 4) % 7  # 1970-01-01 was a Thursday (4)
    day = first + (weekday - first_dow) % 7 + (week - 1) * 7
    nxt = days_from_civil(year + 1, 1, 1) if month == 12 else days_from_civil(year, month + 1, 1)
    while day >= nxt:
        day -= 7
    return day


def rule_changes(std, dst_rule, year):
    """The rule's two offset changes of `year`: (utc_ms, offset_after)."""
    dst, start, end = dst_rule
    s = change_day(year, *start[:3]) * 86400000 + start[3] - std
    e = change_day(year, *end[:3]) * 86400000 + end[3] - dst
    return [(s, dst), (e, std)]


def tzif(path):
    """A TZif file's 64-bit transitions [(utc_ms, offset_ms)], the offset
    before the first, and its footer."""
    data = open(path, "rb").read()
    assert data[:4] == b"TZif" and data[4:5] >= b"2", path

    def counts(at):
        return struct.unpack(">6l", data[at + 20 : at + 44])

    isut, isstd, leap, timecnt, typecnt, charcnt = counts(0)
    v1 = timecnt * 5 + typecnt * 6 + charcnt + leap * 8 + isstd + isut
    at = 44 + v1
    isut, isstd, leap, timecnt, typecnt, charcnt = counts(at)
    at += 44
    times = struct.unpack(f">{timecnt}q", data[at : at + timecnt * 8])
    at += timecnt * 8
    idx = data[at : at + timecnt]
    at += timecnt
    types = [struct.unpack(">lBB", data[at + 6 * i : at + 6 * i + 6])[0] for i in range(typecnt)]
    at += typecnt * 6 + charcnt + leap * 12 + isstd + isut
    footer = data[at:].strip(b"\n").decode()
    transitions = [(t * 1000, types[i] * 1000) for t, i in zip(times, idx)]
    return transitions, types[0] * 1000, footer


def rule_governs(path, std, dst_rule, valid_from):
    """Whether the footer alone gives every offset change from valid_from."""
    transitions, first, _ = tzif(path)
    listed, before = set(), first
    offset_at_from = first
    for t, off in transitions:
        if t <= valid_from:
            offset_at_from = off
        elif off != before:
            listed.add((t, off))
        before = off
    if not listed:
        return True  # the footer governs from the last listed change on
    last = max(t for t, _ in listed)
    expected = set()
    if dst_rule:
        y0 = datetime.datetime.fromtimestamp(valid_from / 1000, datetime.timezone.utc).year
        y1 = datetime.datetime.fromtimestamp(last / 1000, datetime.timezone.utc).year
        for y in range(y0 - 1, y1 + 2):
            for t, off in rule_changes(std, dst_rule, y):
                if valid_from < t <= last:
                    expected.add((t, off))
    if listed != expected:
        return False
    # The offset in force at valid_from, by the rule.
    if dst_rule:
        y = datetime.datetime.fromtimestamp(valid_from / 1000, datetime.timezone.utc).year
        changes = sorted(rule_changes(std, dst_rule, y - 1) + rule_changes(std, dst_rule, y))
        want = [off for t, off in changes if t <= valid_from][-1]
    else:
        want = std
    return want == offset_at_from


def main():
    try:
        import tzdata
    except ImportError:
        sys.exit(f"dev/tzdb.py needs the tzdata package: python3 -m pip install tzdata=={TZDATA_PIN}")
    if tzdata.__version__ != TZDATA_PIN:
        sys.exit(f"tzdata {tzdata.__version__} found, {TZDATA_PIN} pinned: pip install tzdata=={TZDATA_PIN}")
    version = tzdata.IANA_VERSION
    base = os.path.join(os.path.dirname(tzdata.__file__), "zoneinfo")
    names = importlib.resources.files("tzdata").joinpath("zones").read_text().split()
    valid_from = int(VALID_FROM.timestamp() * 1000)
    rules, zones, left_out = [], [], []
    for name in sorted(set(names), key=lambda n: n.encode()):
        path = os.path.join(base, name)
        _, _, footer = tzif(path)
        if not footer:
            left_out.append((name, "no footer"))
            continue
        std, dst_rule = parse_posix(footer)
        if not rule_governs(path, std, dst_rule, valid_from):
            left_out.append((name, f"listed changes after {VALID_FROM:%Y-%m-%d} not in {footer!r}"))
            continue
        if dst_rule is None:
            zones.append((name, ("fixed", std)))
        else:
            key = (std, dst_rule)
            if key not in rules:
                rules.append(key)
            zones.append((name, ("rule", rules.index(key))))
    write_rust(version, rules, zones)
    write_lua(version, rules, zones)
    print(f"tzdata {version}: {len(zones)} names, {len(rules)} daylight-saving rules")
    for name, why in left_out:
        print(f"left out {name}: {why}")


def rule_fields(std, dst_rule):
    dst, start, end = dst_rule
    return std, dst, start, end


def write_rust(version, rules, zones):
    out = [
        f"//! The zone table (generated by dev/tzdb.py from tzdata {version}: do not",
        "//! edit; `make tzdb`): every IANA name whose current rule governs from",
        f"//! {VALID_FROM:%Y-%m-%d} on, sorted by name, with its fixed offset or its",
        "//! daylight-saving rule (offsets in ms east of UTC, change times in ms of",
        "//! local time).",
        "",
        "use super::zone::{Change, Rule, Zone};",
        "",
        "/// The IANA tzdata version the table was generated from.",
        f'pub const VERSION: &str = "{version}";',
        "",
    ]
    out += ["/// The daylight-saving rules, R0 to Rn (`Zone::rule`'s index).", f"pub static RULES: [Rule; {len(rules)}] = ["]
    for i, (std, dst_rule) in enumerate(rules):
        std, dst, start, end = rule_fields(std, dst_rule)

        def change(c):
            m, w, d, t = c
            return f"Change {{ month: {m}, week: {w}, weekday: {d}, time: {t} }}"

        out += [
            f"    // R{i}",
            "    Rule {",
            f"        std: {std},",
            f"        dst: {dst},",
            f"        start: {change(start)},",
            f"        end: {change(end)},",
            "    },",
        ]
    out += ["];"]
    out += ["", "/// Name -> zone, sorted by name (bytes).", f"pub static ZONES: [(&str, Zone); {len(zones)}] = ["]
    for name, (kind, v) in zones:
        value = f"Zone::fixed({v})" if kind == "fixed" else f"Zone::rule({v})"
        out.append(f'    ("{name}", {value}),')
    out += ["];", ""]
    with open(RUST_OUT, "w") as f:
        f.write("\n".join(out))
    # As `cargo fmt` leaves it.
    subprocess.run(["rustfmt", "--edition", "2021", RUST_OUT], check=True)


def write_lua(version, rules, zones):
    # (line, indented): a long string's lines are its content, as written.
    block = [(line, True) for line in [
        f"{LUA_BEGIN} (generated by dev/tzdb.py from tzdata {version}: do not edit; `make tzdb`)",
        "-- Name -> zone (src/time/tzdb.rs), as two strings: the collector visits",
        "-- a string at once, where a table of every name would cost each FCALL.",
        "-- TZ_NAMES has a line '<name> <zone>' for each name: a fixed offset (ms",
        "-- east of UTC), or R<n>, TZ_RULES' line 'R<n> std dst month week weekday",
        "-- time month week weekday time': the offsets (ms east of UTC) and the",
        "-- changes to daylight time and back (POSIX Mm.w.d/time, ms of local time).",
        "-- Each starts with an empty line, so that every line follows a newline.",
        "local TZ_RULES = [[",
    ]]
    block.append(("", False))
    for i, (std, dst_rule) in enumerate(rules):
        std, dst, start, end = rule_fields(std, dst_rule)
        fields = [std, dst, *start, *end]
        block.append((f"R{i} " + " ".join(str(x) for x in fields), False))
    block += [("]]", False), ("local TZ_NAMES = [[", True), ("", False)]
    for name, (kind, v) in zones:
        assert re.fullmatch(r"[A-Za-z0-9_+/-]+", name), name
        value = str(v) if kind == "fixed" else f"R{v}"
        block.append((f"{name} {value}", False))
    block += [("]]", False), (LUA_END, True)]
    text = open(LUA_FILE).read()
    at = text.index(LUA_BEGIN)
    begin = text.rindex("\n", 0, at) + 1
    indent = text[begin:at]  # the block's, as the BEGIN line has it
    end = text.index(LUA_END, begin) + len(LUA_END)
    block = "\n".join(indent + line if indented and line else line for line, indented in block)
    with open(LUA_FILE, "w") as f:
        f.write(text[:begin] + block + text[end:])


if __name__ == "__main__":
    main()
