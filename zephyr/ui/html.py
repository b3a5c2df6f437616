"""Server-side HTML: the page shell, tables and SVG charts (no template engine, no external scripts).

Every value is escaped here (`esc`); pages are built from these helpers only. Charts are inline SVG
with a <title> per point (hover shows the value) and a legend whose entries toggle their series
(zephyr/ui/static/ui.js), so they work offline and need no chart library.
"""

from __future__ import annotations

import html
import json
import math
from collections.abc import Iterable, Sequence
from typing import Any
from urllib.parse import urlencode

__all__ = ["esc", "page", "table", "fmt", "link", "line_chart", "bar_chart", "interval_chart", "url"]

NAV = (
    ("runs", "/", "Runs"),
    ("documents", "/documents", "Documents"),
    ("removed", "/removed", "Removed, and why"),
    ("stores", "/stores", "Token stores"),
    ("training", "/training", "Ablations & training"),
)
PALETTE = ("#2563eb", "#dc2626", "#16a34a", "#9333ea", "#ea580c", "#0891b2", "#4b5563", "#be185d", "#65a30d")


def esc(value: Any) -> str:
    """`value` as HTML text (None as empty), quotes escaped."""
    return html.escape("" if value is None else str(value), quote=True)


def url(route: str, /, **params: Any) -> str:
    """`route` with the non-empty `params` as its query string."""
    clean = {k: v for k, v in params.items() if v not in (None, "")}
    return route + ("?" + urlencode(clean) if clean else "")


def link(href: str, text: Any, **attrs: str) -> str:
    """An HTML link to `href` showing `text`; extra attributes by keyword (`cls=` for class)."""
    names = {"cls": "class"}
    extra = "".join(f' {names.get(k, k.replace("_", "-"))}="{esc(v)}"' for k, v in attrs.items())
    return f'<a href="{esc(href)}"{extra}>{esc(text)}</a>'


def fmt(value: Any, digits: int = 3) -> str:
    """A value for an HTML cell: numbers with separators, everything else escaped."""
    if value is None:
        return "–"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, int):
        return f"{value:,}"
    if isinstance(value, float):
        if math.isnan(value):
            return "nan"
        if math.isinf(value):
            return "∞" if value > 0 else "-∞"
        return f"{value:,.{digits}f}" if abs(value) < 1e6 else f"{value:,.0f}"
    return esc(value)  # anything else (a string in a run record, ...) is data: escaped


def page(title: str, active: str, body: str, *, root: str = "") -> str:
    """A whole HTML page: the navigation with `active` marked, the title, the root's name and `body`."""
    nav = "".join(
        f'<a class="nav{" active" if key == active else ""}" href="{href}">{esc(label)}</a>' for key, href, label in NAV
    )
    return (
        "<!doctype html><html lang=en><head><meta charset=utf-8>"
        f"<title>{esc(title)} · Zephyr</title>"
        '<meta name=viewport content="width=device-width, initial-scale=1">'
        '<link rel=stylesheet href="/static/ui.css"></head><body>'
        f"<header><span class=brand>Zephyr</span>{nav}"
        '<form class=find action="/find" method=get role=search><input name=id id=find-box '
        'placeholder="find a document by id" aria-label="document id" required></form>'
        f'<span class=root title="root">{esc(root)}</span></header>'
        f"<main><h1>{esc(title)}</h1>{body}</main>"
        '<script src="/static/ui.js"></script></body></html>'
    )


def table(headers: Sequence[str], rows: Iterable[Sequence[str]], *, cls: str = "", id: str = "") -> str:
    """`rows` hold already-escaped HTML cells."""
    head = "".join(f"<th>{esc(h)}</th>" for h in headers)
    body = "".join("<tr>" + "".join(f"<td>{c}</td>" for c in row) + "</tr>" for row in rows)
    ident = f' id="{esc(id)}"' if id else ""
    return f'<table class="{esc(cls)}"{ident}><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>'


def _ticks(lo: float, hi: float, n: int = 5) -> list[float]:
    if hi <= lo:
        return [lo]
    raw = (hi - lo) / n
    mag = 10 ** math.floor(math.log10(raw))
    step = min((m * mag for m in (1, 2, 5, 10) if m * mag >= raw), default=raw)
    first = math.ceil(lo / step) * step
    return [first + i * step for i in range(int((hi - first) / step) + 1)]


def line_chart(
    series: dict[str, Sequence[Sequence[float]]],
    *,
    title: str,
    x_label: str = "step",
    y_label: str = "",
    width: int = 640,
    height: int = 300,
) -> str:
    """Lines with hoverable points and a clickable legend; `series` maps a name to [[x, y], ...]."""
    points = [(float(x), float(y)) for pts in series.values() for x, y in pts if y is not None and math.isfinite(y)]
    if not points:
        return f"<figure class=chart><figcaption>{esc(title)}</figcaption><p class=muted>no data</p></figure>"
    x0, x1 = min(p[0] for p in points), max(p[0] for p in points)
    y0, y1 = min(p[1] for p in points), max(p[1] for p in points)
    if x1 == x0:
        x1 = x0 + 1
    if y1 == y0:
        y0, y1 = y0 - 0.5, y1 + 0.5
    pad = (y1 - y0) * 0.05
    y0, y1 = y0 - pad, y1 + pad
    left, right, top, bottom = 56, 12, 10, 34
    w, h = width - left - right, height - top - bottom

    def sx(x: float) -> float:
        return left + (x - x0) / (x1 - x0) * w

    def sy(y: float) -> float:
        return top + (1 - (y - y0) / (y1 - y0)) * h

    parts = [f'<svg class=chart-svg viewBox="0 0 {width} {height}" width="{width}" height="{height}" role=img>']
    for t in _ticks(y0, y1):
        parts.append(
            f'<line class=grid x1={left} x2={left + w} y1="{sy(t):.1f}" y2="{sy(t):.1f}"/>'
            f'<text class=tick x="{left - 4}" y="{sy(t) + 4:.1f}" text-anchor=end>{esc(f"{t:.4g}")}</text>'
        )
    for t in _ticks(x0, x1):
        parts.append(f'<text class=tick x="{sx(t):.1f}" y="{top + h + 14}" text-anchor=middle>{esc(f"{t:.6g}")}</text>')
    parts.append(f'<text class=axis x="{left + w / 2}" y="{height - 4}" text-anchor=middle>{esc(x_label)}</text>')
    parts.append(f'<rect class="frame" x="{left}" y="{top}" width="{w}" height="{h}"/>')
    legend = []
    for k, (name, pts) in enumerate(series.items()):
        color = PALETTE[k % len(PALETTE)]
        clean = [(float(x), float(y)) for x, y in pts if y is not None and math.isfinite(y)]
        path = " ".join(f"{'M' if i == 0 else 'L'}{sx(x):.1f},{sy(y):.1f}" for i, (x, y) in enumerate(clean))
        dots = "".join(
            f'<circle cx="{sx(x):.1f}" cy="{sy(y):.1f}" r=2.5><title>{esc(name)} · {esc(x_label)} '
            f"{esc(f'{x:g}')}: {esc(f'{y:.5g}')}</title></circle>"
            for x, y in clean
        )
        parts.append(
            f'<g class=series data-series="{k}" stroke="{color}" fill="{color}">'
            f'<path d="{path}" fill="none" stroke-width="1.6"/>{dots}</g>'
        )
        legend.append(
            f'<button type=button class=legend data-series="{k}"><i style="background:{color}"></i>{esc(name)}</button>'
        )
    parts.append("</svg>")
    ylab = f"<span class=ylabel>{esc(y_label)}</span>" if y_label else ""
    return (
        f'<figure class="chart line-chart"><figcaption>{esc(title)} {ylab}</figcaption>{"".join(parts)}'
        f"<div class=legend-row>{''.join(legend)}</div></figure>"
    )


def bar_chart(bars: Sequence[tuple[str, float]], *, title: str, width: int = 640, height: int = 220) -> str:
    """Vertical bars (a histogram): `bars` is [(label, value)]."""
    if not bars:
        return f"<figure class=chart><figcaption>{esc(title)}</figcaption><p class=muted>no data</p></figure>"
    top_value = max(v for _, v in bars) or 1
    left, bottom, top = 48, 40, 10
    w, h = width - left - 8, height - bottom - top
    bw = w / len(bars)
    parts = [f'<svg class=chart-svg viewBox="0 0 {width} {height}" width="{width}" height="{height}" role=img>']
    for t in _ticks(0, top_value, 4):
        y = top + h - t / top_value * h
        parts.append(
            f'<line class=grid x1={left} x2={left + w} y1="{y:.1f}" y2="{y:.1f}"/>'
            f'<text class=tick x="{left - 4}" y="{y + 4:.1f}" text-anchor=end>{esc(f"{t:g}")}</text>'
        )
    for i, (label, value) in enumerate(bars):
        bh = value / top_value * h
        x = left + i * bw
        parts.append(
            f'<rect class=bar x="{x + 1:.1f}" y="{top + h - bh:.1f}" width="{max(1.0, bw - 2):.1f}" '
            f'height="{bh:.1f}"><title>{esc(label)}: {esc(fmt(value))}</title></rect>'
        )
        if len(bars) <= 12 or i % max(1, len(bars) // 8) == 0:
            parts.append(
                f'<text class=tick x="{x + bw / 2:.1f}" y="{top + h + 14}" text-anchor=middle>'
                f"{esc(label.split('–')[0])}</text>"
            )
    parts.append("</svg>")
    return f"<figure class=chart><figcaption>{esc(title)}</figcaption>{''.join(parts)}</figure>"


def interval_chart(items: Sequence[dict], *, title: str, width: int = 640) -> str:
    """Paired differences with confidence intervals: one row per item {label, mean, low, high, verdict}."""
    finite = [
        v
        for it in items
        for v in (it.get("low"), it.get("high"), it.get("mean"))
        if isinstance(v, (int, float)) and math.isfinite(v)
    ]
    if not finite:
        return (
            f"<figure class=chart><figcaption>{esc(title)}</figcaption><p class=muted>no finite intervals</p></figure>"
        )
    lo, hi = min(finite + [0.0]), max(finite + [0.0])
    span = (hi - lo) or 1.0
    lo, hi = lo - span * 0.1, hi + span * 0.1
    label_w, row_h = 220, 24
    height = 30 + row_h * len(items)
    w = width - label_w - 16

    def sx(v: float) -> float:
        return label_w + (min(max(v, lo), hi) - lo) / (hi - lo) * w

    parts = [
        f'<svg class=chart-svg viewBox="0 0 {width} {height}" width="{width}" height="{height}" role=img>',
        f'<line class=zero x1="{sx(0):.1f}" x2="{sx(0):.1f}" y1=4 y2="{height - 20}"/>',
    ]
    for t in _ticks(lo, hi, 4):
        parts.append(f'<text class=tick x="{sx(t):.1f}" y="{height - 4}" text-anchor=middle>{esc(f"{t:.3g}")}</text>')
    for i, it in enumerate(items):
        y = 14 + i * row_h
        verdict = str(it.get("verdict") or "")
        low = it.get("low") if isinstance(it.get("low"), (int, float)) and math.isfinite(it["low"]) else lo
        high = it.get("high") if isinstance(it.get("high"), (int, float)) and math.isfinite(it["high"]) else hi
        mean = it.get("mean")
        tip = f"{it.get('label')}: {fmt(mean, 4)} [{fmt(it.get('low'), 4)}, {fmt(it.get('high'), 4)}] {verdict}"
        parts.append(
            f'<text class=rowlabel x=4 y="{y + 4}">{esc(it.get("label"))}</text>'
            f'<g class="ci {esc(verdict)}"><title>{esc(tip)}</title>'
            f'<line x1="{sx(low):.1f}" x2="{sx(high):.1f}" y1="{y}" y2="{y}" stroke-width="2"/>'
        )
        if isinstance(mean, (int, float)) and math.isfinite(mean):
            parts.append(f'<circle cx="{sx(mean):.1f}" cy="{y}" r="4"/>')
        parts.append("</g>")
    parts.append("</svg>")
    return f"<figure class=chart><figcaption>{esc(title)}</figcaption>{''.join(parts)}</figure>"


def pre_json(value: Any) -> str:
    """`value` as indented JSON in a <pre> block."""
    return f"<pre class=json>{esc(json.dumps(value, indent=1, ensure_ascii=False, default=str))}</pre>"
