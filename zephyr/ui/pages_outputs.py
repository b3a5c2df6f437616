"""The output pages: token stores, their documents, mixtures; ablations and training runs with their reports."""

from __future__ import annotations

from starlette.requests import Request

from zephyr.ui import stores, training
from zephyr.ui.html import bar_chart, esc, fmt, interval_chart, line_chart, link, table, url
from zephyr.ui.params import query_int, query_param
from zephyr.ui.source import Root

__all__ = [
    "stores_data",
    "render_stores",
    "store_data",
    "render_store",
    "store_doc_data",
    "render_store_doc",
    "mixture_data",
    "render_mixture",
    "training_data",
    "render_training",
    "train_run_data",
    "render_train_run",
    "report_data",
    "render_report",
    "ladder_data",
    "render_ladder",
]


# -------------------------------------------------------------------------------------------- stores
def stores_data(root: Root, request: Request) -> dict:
    """The token stores page's data: every store and mixture under the root."""
    return {"stores": stores.list_stores(root), "mixtures": stores.list_mixtures(root)}


def render_stores(root: Root, data: dict) -> str:
    """The token stores page: a table of the stores (documents, tokens, dtype, tokenizer) and the mixtures."""
    rows = [
        [
            link(url("/stores/view", path=s["path"]), s["path"]),
            esc(s.get("split")),
            fmt(s["documents"]),
            fmt(s["tokens"]),
            esc(s["dtype"]),
            esc(s["tokenizer"]),
            fmt(s["shards"]),
        ]
        for s in data["stores"]
    ]
    mixes = "".join(f"<li>{link(url('/stores/mixture', path=m), m)}</li>" for m in data["mixtures"])
    return (
        table(["store", "split", "documents", "tokens", "dtype", "tokenizer", "shards"], rows, id="stores")
        + f"<h2>Mixtures</h2><ul>{mixes or '<li class=muted>none</li>'}</ul>"
    )


def store_data(root: Root, request: Request) -> dict:
    """One store's page data: its figures, length histogram and a page of documents."""
    return stores.store_view(
        root,
        query_param(request, "path", True),
        offset=query_int(request, "offset", 0),
        limit=query_int(request, "limit", 20, 1, 500),
    )


def render_store(root: Root, data: dict) -> str:
    """One store's page: its summary, the document length histogram and a page of documents."""
    length = data["length"]
    summary = (
        f"<p>{fmt(data['documents'])} documents · {fmt(data['tokens'])} tokens · {esc(data['dtype'])} · "
        f"{fmt(data['shards'])} shards · tokenizer {esc(data['tokenizer'].get('name'))} · length mean "
        f"{fmt(length['mean'], 1)}, p50 {fmt(length['p50'], 0)}, p90 {fmt(length['p90'], 0)}, max {fmt(length['max'])}"
        + (
            f" · validation {fmt(data['validation']['documents'])} docs / {fmt(data['validation']['tokens'])} tokens"
            if data.get("validation")
            else ""
        )
        + "</p>"
    )
    chart = bar_chart(
        [(f"{b['lo']}–{b['hi']}", b["count"]) for b in data["histogram"]], title="document length (tokens)"
    )
    rows = [
        [link(url("/stores/doc", path=data["path"], index=d["index"]), f"document {d['index']}"), fmt(d["tokens"])]
        for d in data["docs"]
    ]
    nav = (
        link(url("/stores/view", path=data["path"], offset=data["offset"] + data["limit"]), "next →")
        if data["offset"] + data["limit"] < data["documents"]
        else ""
    )
    return summary + chart + table(["document", "tokens"], rows, id="store-docs") + f"<p class=pager>{nav}</p>"


def store_doc_data(root: Root, request: Request) -> dict:
    """One document of a store, decoded with its token boundaries."""
    return stores.store_document(root, query_param(request, "path", True), query_int(request, "index", 0))


def render_store_doc(root: Root, data: dict) -> str:
    """One document of a store: its tokens shown with their boundaries."""
    head = (
        f"<p>{link(url('/stores/view', path=data['path']), data['path'])} / document {data['index']}: "
        f"{fmt(data['tokens'])} tokens (showing {fmt(data['shown'])}), tokenizer {esc(data['tokenizer'])}</p>"
    )
    if not data["decoded"]:
        return (
            head
            + "<p class=muted>tokenizer unavailable or its hash differs: ids only</p>"
            + f"<pre class=doctext>{esc(' '.join(map(str, data['ids'])))}</pre>"
        )
    spans = "".join(f'<span class=tok title="id {p["id"]}">{esc(p["text"])}</span>' for p in data["pieces"])
    return head + f'<div class="doctext tokens" id=tokens>{spans}</div>'


def mixture_data(root: Root, request: Request) -> dict:
    """A mixture's page data: its stores' weights and, for a token budget, the epochs each store takes."""
    budget = query_int(request, "budget", 0) or None
    return stores.mixture_view(
        root,
        query_param(request, "path", True),
        budget=budget,
        runs=training.training_budgets(root) if budget is None else None,
    )


def render_mixture(root: Root, data: dict) -> str:
    """A mixture's page: weights and epochs per store, with a form to recompute for another token budget."""
    form = (
        f'<form method=get action="/stores/mixture"><input type=hidden name=path value="{esc(data["path"])}">'
        f'<label>token budget <input name=budget value="{data["budget"]}"></label> <button>recompute</button></form>'
    )
    rows = [
        [
            esc(c["name"]),
            link(url("/stores/view", path=c["store"]), c["store"]),
            fmt(c["weight"], 4),
            fmt(c["tokens"]),
            fmt(c["sampled_tokens"]),
            fmt(c["epochs"], 2),
        ]
        for c in data["components"]
    ]
    chart = bar_chart([(c["name"], c["epochs"] or 0.0) for c in data["components"]], title="epochs per component")
    return (
        form + f"<p>the stores hold {fmt(data['store_tokens'])} tokens; budget {fmt(data['budget'])} "
        f"({esc(data['budget_from'])})</p>"
        + table(["component", "store", "weight", "store tokens", "sampled tokens", "epochs"], rows, id="mixture")
        + chart
    )


# ------------------------------------------------------------------------------------------ training
def training_data(root: Root, request: Request) -> dict:
    """The ablations and training page's data: every training run, ablation report and ladder report under the root."""
    return {
        "runs": training.list_training(root),
        "reports": training.list_reports(root),
        "ladders": training.list_ladders(root),
    }


def render_training(root: Root, data: dict) -> str:
    """The ablations and training page: links to each training run, ablation report and ladder report."""
    runs_html = "".join(f"<li>{link(url('/training/run', path=p), p or '.')}</li>" for p in data["runs"])
    reports = "".join(f"<li>{link(url('/training/report', path=p), p or '.')}</li>" for p in data["reports"])
    ladders = "".join(f"<li>{link(url('/training/ladder', path=p), p or '.')}</li>" for p in data["ladders"])
    return (
        f"<h2>Training runs</h2><ul id=train-runs>{runs_html or '<li class=muted>none</li>'}</ul>"
        f"<h2>Ablation reports</h2><ul id=reports>{reports or '<li class=muted>none</li>'}</ul>"
        f"<h2>Scaling ladders</h2><ul id=ladders>{ladders or '<li class=muted>none</li>'}</ul>"
    )


def train_run_data(root: Root, request: Request) -> dict:
    """One training run's data: its loss and bits-per-byte curves and end figures."""
    return training.training_view(root, query_param(request, "path", True))


def render_train_run(root: Root, data: dict) -> str:
    """One training run's page: loss and bits-per-byte curves, final loss, tokens/s."""
    series = data["series"]
    loss = {k: v for k, v in series.items() if k == "loss" or k.endswith("/loss")}
    bpb = {k: v for k, v in series.items() if k.endswith("/bpb")}
    end = data.get("end") or {}
    summary = (
        f"<p>final loss {fmt(end.get('final_loss'), 4)} · {fmt(end.get('tokens_per_s'), 0)} tokens/s · "
        f"params {fmt((data.get('start') or {}).get('params'))}</p>"
    )
    evals = [[esc(k), fmt(v.get("loss"), 4), fmt(v.get("bpb"), 4)] for k, v in (end.get("eval") or {}).items()]
    return (
        summary
        + line_chart(loss, title="loss", y_label="nats/token")
        + line_chart(bpb, title="bits per byte")
        + (table(["eval set", "loss", "bits per byte"], evals) if evals else "")
    )


def report_data(root: Root, request: Request) -> dict:
    """One ablation report's data: verdicts, paired differences and per-run rows."""
    return training.report_view(root, query_param(request, "path", True))


def render_report(root: Root, data: dict) -> str:
    """One ablation report's page: the verdicts, the paired differences with their intervals, the runs."""
    verdicts = [
        [
            esc(v.get("mixture")),
            esc(v.get("derivation")),
            f'<b class="verdict {esc(v.get("verdict"))}">{esc(v.get("verdict"))}</b>',
            esc(v.get("line")),
        ]
        for v in data["verdicts"]
    ]
    items = [{"label": f"{d['mixture']} · {d['eval_set']} · {d['metric']}", **d} for d in data["differences"]]
    charts = []
    keys = sorted({k.rsplit("/", 1)[0] for k in data["curves"]})
    for key in keys:
        series = {k.rsplit("/", 1)[1]: v for k, v in data["curves"].items() if k.rsplit("/", 1)[0] == key}
        charts.append(line_chart(series, title=f"{key} (mean over seeds)"))
    return (
        f"<p>baseline <b>{esc(data['baseline'])}</b> · metric {esc(data['metric'])} · confidence "
        f"{fmt(data['confidence'], 2)} · seeds {esc(data['seeds'])}</p>"
        + table(["candidate", "derivation", "verdict", "summary"], verdicts, id="verdicts")
        + interval_chart(items, title=f"paired difference vs {data['baseline']} (candidate − baseline; < 0 is better)")
        + "".join(charts)
        + "".join(f"<p class=muted>{esc(n)}</p>" for n in data["notes"])
    )


def ladder_data(root: Root, request: Request) -> dict:
    """The ladder page's data: one ladder report (`ladder.json`) under the root."""
    return training.ladder_view(root, query_param(request, "path", True))


def _pct(value: float | None) -> str:
    return "–" if value is None else f"{100 * value:+.2f}%"


def _span(pair: list | None) -> str:
    return "–" if not pair else f"[{fmt(pair[0], 4)}, {fmt(pair[1], 4)}]"


def render_ladder(root: Root, data: dict) -> str:
    """The ladder page: the target, each mixture's law, prediction and measured loss, the ranking's intervals."""
    target = data.get("target") or {}
    target_flops = f"{target.get('flops') or 0:.3g}"
    summary = (
        f"<p>target <b>{esc(target.get('name'))}</b>: {fmt(target.get('params'))} params, "
        f"{fmt(target.get('tokens'))} tokens, {esc(target_flops)} FLOPs · extrapolation "
        f"{fmt(data.get('extrapolation'), 1)}x the largest ladder run · ladder compute "
        f"{fmt(100 * (data.get('ladder_flops_share') or 0), 1)}% of the targets' · {esc(data.get('metric'))} on "
        f"{esc(', '.join(data.get('decision_sets') or []))}</p>"
        f"<p id=ladder-verdict><b>{esc(data.get('verdict'))}</b></p>"
    )
    rows = []
    for m in data.get("mixtures") or []:
        law = m.get("law") or {}
        holdout = m.get("holdout") or {}
        rows.append(
            [
                esc(m["mixture"]),
                esc(m.get("description")),
                fmt(law.get("alpha"), 3),
                fmt(law.get("E"), 3),
                _pct(holdout.get("error")),
                fmt(m.get("predicted"), 4),
                _span(m.get("interval")),
                fmt(m.get("measured_mean"), 4),
                _pct(m.get("error")),
                fmt(m.get("tokens_per_param"), 1),
            ]
        )
    table_html = table(
        [
            "mixture",
            "weights",
            "alpha",
            "E",
            "holdout error",
            "predicted",
            "interval",
            "measured",
            "error",
            "optimal tokens/param",
        ],
        rows,
        id="ladder-mixtures",
    )
    pairs = [
        {
            "label": f"{p['worse']} − {p['better']}",
            "mean": p["mean"],
            "low": p["low"],
            "high": p["high"],
            "verdict": "worse" if p["decided"] else "inconclusive",
        }
        for p in data.get("pairs") or []
    ]
    measured = data.get("ranking_measured")
    rankings = (
        f"<p>ranking measured at the ladder's largest run ({esc(data.get('ladder_point'))}): "
        f"{esc(' < '.join(data.get('ranking_ladder') or []))}"
        + (f" · measured at the target: {esc(' < '.join(measured))}" if measured else "")
        + "</p>"
    )
    points = [
        [
            esc(p["name"]),
            esc(p["kind"]),
            fmt(p["width"]),
            fmt(p["layers"]),
            fmt(p["params"]),
            fmt(p["tokens"]),
            esc(f"{p['flops']:.3g}"),
            esc(f"{p['learning_rate']:.3g}"),
        ]
        for p in data.get("points") or []
    ]
    transfer = [
        [
            fmt(t["width"]),
            esc(", ".join(f"x{k} {v:.4f}" for k, v in t["losses"].items())),
            esc(f"x{t['best_multiplier']:g}"),
            _pct(t["recipe_gap"]),
            fmt(t["holds"]),
        ]
        for t in data.get("transfer") or []
    ]
    return (
        summary
        + table_html
        + line_chart(
            data.get("chart") or {},
            title="eval loss against compute: runs, fitted law, predicted and measured target",
            x_label="log10 training FLOPs",
            y_label=str(data.get("metric") or ""),
        )
        + interval_chart(pairs, title="predicted gap at the target between adjacent mixtures (> 0: ranking holds)")
        + rankings
        + (
            "<h2>Learning-rate transfer</h2>"
            + table(["width", "loss by multiplier", "best", "recipe vs best", "holds"], transfer, id="transfer")
            if transfer
            else ""
        )
        + "<h2>Points</h2>"
        + table(["point", "kind", "width", "layers", "params", "tokens", "FLOPs", "lr"], points, id="ladder-points")
        + "".join(f"<p class=muted>{esc(n)}</p>" for n in data.get("notes") or [])
    )
