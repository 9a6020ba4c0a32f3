#!/usr/bin/env python3
"""Draws docs/algorithms.svg: one bursty trace replayed against the real module.

How the figure is made (run it with `make figure`):
- A valkey-server is started on a free 127.0.0.1 port with
  target/release/libvalkey_ratelimit.so loaded, and stopped at the end, by
  the benchmarks' harness (bench/valkey_harness.py).
- Time is real: the trace is played with real sleeps, WINDOW 1000 ms, about
  4.6 s in all. It starts on a whole second of the clock, so the windows
  aligned to the epoch (the sliding window's, and the fixed window's with
  ALIGN) begin at 0, 1, 2 ... s of the plot.
- Six limiters, one key each: fixed (its window opens at its first request),
  fixed with ALIGN (its windows start at multiples of WINDOW since the epoch),
  sliding, token, gcra and leaky.
- Each step of the trace is one MULTI/EXEC holding a TIME and every request of
  the step for every limiter, so all six see one server time (the module reads
  its clock once per call, and the clock is frozen in a transaction). Each
  point is drawn at the TIME the server gave its step.
- The trace: one request at 0.5 s, mid-second, opens the first-hit fixed
  window (0.5 to 1.5 s) while the aligned one is already in its 0 to 1 s
  window; a burst of 15 at 0.95 s, just before the aligned seam at 1 s; a
  burst of 15 at 1.05 s, just after it (and still inside the first-hit
  window); then, from 2.1 s to 4.5 s, one request every 105 ms: a client
  keeping just under the limit's rate (every 100 ms would be at the rate, and
  a few ms of timer jitter would then put 11 requests in some 1000 ms).
- A fixed window is shaded from the module's replies: each admitted request
  that finds no open window opens one, ending at its arrival +
  reset_after_ms and starting WINDOW before that end.
- Every decision drawn is the module's reply. The line is the number of
  requests admitted in the trailing window; the dashed line is LIMIT. For
  leaky it counts the requests that proceed in the window instead: each one's
  start is read from the state the module wrote (`leaky:<ns>`, the time the
  queue drains, one interval after the start), in ns, since arrival +
  retry_after_ms is rounded up to whole ms. token and gcra must decide alike;
  the script checks it, and draws both if they do not.
No plotting library: the SVG is written directly. Only the Python standard
library is needed.
"""

import os
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "bench"))
import valkey_harness as vh  # noqa: E402

OUT = ROOT / "docs" / "algorithms.svg"

LIMIT = 10
WINDOW_MS = 1000
BURST_SIZE = 15
# (name in the figure, ALGO, extra options): one limiter, one key, each.
LIMITERS = [
    ("fixed", "fixed", ()),
    ("fixed ALIGN", "fixed", ("ALIGN",)),
    ("sliding", "sliding", ()),
    ("token", "token", ()),
    ("gcra", "gcra", ()),
    ("leaky", "leaky", ()),
]
NAMES = [name for name, _, _ in LIMITERS]
# The buckets' emission interval: WINDOW / LIMIT, rounded up to whole ns.
INTERVAL_NS = -(-WINDOW_MS * 1_000_000 // LIMIT)


def trace():
    """(offset in s from the aligned start, number of requests) per step."""
    steps = [(0.5, 1), (0.95, BURST_SIZE), (1.05, BURST_SIZE)]
    steps += [(2.1 + 0.105 * i, 1) for i in range(23)]
    return steps


# --- replaying the trace ----------------------------------------------------------


def replay(client):
    """Per limiter (by its name in the figure), a list of (t_s, admitted,
    retry_after_ms, reset_after_ms, start_s): start_s is when an admitted
    leaky request proceeds, else t_s."""
    # Start on a whole second, so the aligned windows line up with the
    # plot's seconds and the first-hit fixed window opens mid-second.
    sec, usec = (int(x) for x in client.call("TIME"))
    start = sec + 1
    time.sleep(max(0.0, start - (sec + usec / 1e6) - 0.002))
    local_start = time.monotonic()
    decisions = {name: [] for name in NAMES}
    for offset, count in trace():
        delay = local_start + offset - time.monotonic()
        if delay > 0:
            time.sleep(delay)
        cmds = [("MULTI",), ("TIME",)]
        for name, algo, extra in LIMITERS:
            key = "fig:" + name.replace(" ", "-").lower()
            for _ in range(count):
                cmds.append(("RL.ADMIT", key, "ALGO", algo,
                             "LIMIT", LIMIT, "WINDOW", WINDOW_MS, *extra))
                if algo == "leaky":
                    cmds.append(("GET", key))
        cmds.append(("EXEC",))
        client.send(*cmds)
        for _ in range(len(cmds) - 1):
            client.read()  # +OK and +QUEUED
        replies = client.read()
        sec, usec = (int(x) for x in replies[0])
        t = sec - start + usec / 1e6
        replies = iter(replies[1:])
        for name, algo, _ in LIMITERS:
            for _ in range(count):
                admitted, _limit, _rem, retry, reset = next(replies)
                began = t
                if algo == "leaky":
                    drains_ns = int(next(replies).split(":")[1])
                    if admitted:
                        began = (drains_ns - INTERVAL_NS) / 1e9 - start
                        # The reply's delay is the same start, rounded up to ms.
                        assert -0.002 < t + retry / 1000 - began < 0.002, (t, retry, began)
                decisions[name].append((t, admitted == 1, retry, reset, began))
    return decisions


# --- drawing ------------------------------------------------------------------------


def trailing_counts(times, window_s):
    """Step points (t, admitted in (t - window, t]) over the sorted times."""
    times = sorted(times)
    events = [(t, 1) for t in times] + [(t + window_s, -1) for t in times]
    # A request leaves the window before one arriving at the same instant
    # joins it: the window is (t - window, t].
    events.sort(key=lambda e: (e[0], e[1]))
    points, n = [(0.0, 0)], 0
    for t, d in events:
        n += d
        points.append((t, n))
    return points


def burst_counts(rows):
    """How many of each of the two bursts were admitted."""
    bursts = [offset for offset, count in trace() if count > 1]
    return [sum(1 for t, ok, _, _, _ in rows if ok and abs(t - b) < 0.04) for b in bursts]


def svg(decisions, token_equals_gcra):
    def seam(algo):
        first, second = burst_counts(decisions[algo])
        return first, second, first + second

    h1, h2, _ = seam("fixed")
    opened_at = next(t for t, ok, _, _, _ in decisions["fixed"] if ok)
    a1, a2, asum = seam("fixed ALIGN")
    _, s2, _ = seam("sliding")
    t1, t2, _ = seam("token")
    panels = [
        ("fixed", f"fixed (window from the first hit, {opened_at:.1f} s): both bursts "
         f"fall in its first window, {h1} admitted, then {h2}"),
        ("fixed ALIGN", f"fixed ALIGN (windows on the clock's seconds): {a1} admitted "
         f"just before the seam at 1 s and {a2} just after: {asum} within 0.1 s"),
        ("sliding", "sliding (windows on the clock's seconds too): the previous window "
         f"still counts, so the burst after the seam at 1 s gets {s2}"),
        ("token", "token"
         + (" = gcra (identical decisions)" if token_equals_gcra else "")
         + f": a full bucket passes ({t1}), then only what has refilled: {t2} "
         "of the burst 0.1 s later"),
        ("leaky", "leaky: admitted requests queue, then proceed one interval apart"),
    ]
    if not token_equals_gcra:
        panels.insert([p[0] for p in panels].index("token") + 1, ("gcra", "gcra"))
    width, left, right = 900, 40, 20
    panel_h, top, gap = 110, 78, 62
    t_max = 4.6
    y_max = 2.4 * LIMIT
    height = top + len(panels) * (panel_h + gap) + 4
    plot_w = width - left - right

    def x(t):
        return left + plot_w * t / t_max

    out = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
        f'viewBox="0 0 {width} {height}" '
        'font-family="DejaVu Sans, Helvetica, Arial, sans-serif" font-size="12">',
        f'<rect width="{width}" height="{height}" fill="white"/>',
        f'<text x="{left}" y="22" font-size="15" font-weight="bold">One bursty trace '
        f'through each algorithm, as the module decided it: LIMIT {LIMIT} WINDOW '
        f'{WINDOW_MS}</text>',
        f'<text x="{left}" y="42" fill="#444">Line: requests admitted in the trailing '
        f'{WINDOW_MS} ms (leaky: requests proceeding in it). Dashed: the limit.</text>',
        f'<text x="{left}" y="58" fill="#444">Ticks: each request at its arrival, '
        'admitted (dark) or refused (red); a burst\'s tick says how many of it were '
        'admitted.</text>',
    ]
    for i, (name, title) in enumerate(panels):
        y0 = top + i * (panel_h + gap) + 18  # top of the plot area
        y1 = y0 + panel_h

        def y(v):
            return y1 - panel_h * v / y_max

        rows = decisions[name]
        out.append(f'<text x="{left}" y="{y0 - 8}" font-weight="bold">{title}</text>')
        # Fixed windows: shade each window, from the replies. An admitted
        # request that finds no open window opens one; it ends at arrival +
        # reset_after_ms and began WINDOW before (at that first hit, or with
        # ALIGN at the multiple of WINDOW the request fell in).
        if name.startswith("fixed"):
            opened = []
            for t, ok, _retry, reset, _ in rows:
                if ok and (not opened or t >= opened[-1][1]):
                    end = t + reset / 1000
                    opened.append((max(0.0, end - WINDOW_MS / 1000), end))
            for k, (a, b) in enumerate(opened):
                fill = "#dfe8f6" if k % 2 == 0 else "#eef3fa"
                out.append(f'<rect x="{x(a):.1f}" y="{y0}" '
                           f'width="{x(min(b, t_max)) - x(a):.1f}" height="{panel_h}" '
                           f'fill="{fill}"/>')
                out.append(f'<line x1="{x(a):.1f}" y1="{y0}" x2="{x(a):.1f}" y2="{y1}" '
                           'stroke="#7f9cc9" stroke-width="1"/>')
                out.append(f'<text x="{x(a) + 3:.1f}" y="{y1 - 4}" font-size="10" '
                           f'fill="#5a6b8c">window {k + 1}</text>')
        for s in range(0, int(t_max) + 1):
            out.append(f'<line x1="{x(s):.1f}" y1="{y0}" x2="{x(s):.1f}" y2="{y1}" '
                       'stroke="#bbb" stroke-dasharray="2,3"/>')
            if i == len(panels) - 1:
                out.append(f'<text x="{x(s):.1f}" y="{y1 + 40}" text-anchor="middle" '
                           f'fill="#444">{s} s</text>')
        for v in (0, LIMIT, 2 * LIMIT):
            out.append(f'<text x="{left - 6}" y="{y(v) + 4:.1f}" text-anchor="end" '
                       f'fill="#444">{v}</text>')
        out.append(f'<line x1="{left}" y1="{y1}" x2="{width - right}" y2="{y1}" '
                   'stroke="#888"/>')
        out.append(f'<line x1="{left}" y1="{y(LIMIT):.1f}" x2="{width - right}" '
                   f'y2="{y(LIMIT):.1f}" stroke="#c0392b" stroke-width="1.5" '
                   'stroke-dasharray="6,4"/>')
        out.append(f'<text x="{width - right - 4}" y="{y(LIMIT) - 5:.1f}" '
                   f'text-anchor="end" fill="#c0392b">LIMIT {LIMIT}</text>')
        if name == "leaky":
            counted = [began for _, ok, _, _, began in rows if ok]
        else:
            counted = [t for t, ok, _, _, _ in rows if ok]
        points = trailing_counts(counted, WINDOW_MS / 1000)
        path = [f"M{x(0):.1f},{y(0):.1f}"]
        prev = 0
        for t, n in points:
            t = min(t, t_max)
            path.append(f"L{x(t):.1f},{y(prev):.1f}L{x(t):.1f},{y(n):.1f}")
            prev = n
        path.append(f"L{x(t_max):.1f},{y(prev):.1f}")
        d = "".join(path)
        out.append(f'<path d="{d}L{x(t_max):.1f},{y1}L{x(0):.1f},{y1}Z" fill="#2c3e50" '
                   'fill-opacity="0.15" stroke="none"/>')
        out.append(f'<path d="{d}" fill="none" stroke="#2c3e50" stroke-width="1.8"/>')
        peak_t, peak = max(points, key=lambda p: p[1])
        over = peak > LIMIT
        label = f"at most {peak} in any {WINDOW_MS} ms"
        out.append(f'<text x="{x(min(peak_t, 3.2)) + 6:.1f}" y="{y(peak) - 6:.1f}" '
                   f'fill="{"#c0392b" if over else "#2c3e50"}" font-weight="bold">'
                   f'{label}</text>')
        # One tick per request at its arrival; each burst also gets a count.
        for t, ok, _, _, _ in rows:
            colour = "#2c3e50" if ok else "#e74c3c"
            out.append(f'<line x1="{x(t):.1f}" y1="{y1 + 3}" x2="{x(t):.1f}" '
                       f'y2="{y1 + 13}" stroke="{colour}" stroke-width="1.2"/>')
        for offset, count in trace():
            if count > 1:
                near = [(t, a) for t, a, _, _, _ in rows if abs(t - offset) < 0.04]
                ok = sum(1 for _, a in near if a)
                t = min(t for t, _ in near)
                anchor, dx = ("end", -3) if offset < 1 else ("start", 3)
                out.append(f'<text x="{x(t) + dx:.1f}" y="{y1 + 26}" '
                           f'text-anchor="{anchor}" font-size="11" fill="#333">'
                           f'{ok} of {count}</text>')
    out.append("</svg>")
    return "\n".join(out) + "\n"


def main():
    # The benchmarks' harness starts and stops the throwaway server.
    with vh.Server() as server:
        decisions = replay(server.client())
    token = [ok for _, ok, _, _, _ in decisions["token"]]
    gcra = [ok for _, ok, _, _, _ in decisions["gcra"]]
    same = token == gcra
    if not same:
        print("note: token and gcra decided differently; both are drawn", file=sys.stderr)
    OUT.write_text(svg(decisions, same))
    for name in NAMES:
        n = sum(1 for _, ok, _, _, _ in decisions[name] if ok)
        print(f"{name:11} admitted {n} of {len(decisions[name])}")
    print(f"wrote {OUT.relative_to(ROOT)}")


if __name__ == "__main__":
    os.chdir(ROOT)
    main()
