"""`zephyr ui` over real recipe outputs, through a real server on 127.0.0.1: every page and JSON endpoint,
filters against the engine's own filter, lineage links from a removed document to its keeper."""

from __future__ import annotations

import json
import time
import urllib.parse
from pathlib import Path

import pytest

from zephyr import Dataset, execution
from zephyr.operators import text_hash
from zephyr.ui.filters import parse_filter

q = urllib.parse.quote


def _urls(server) -> list[str]:
    """Every page with real parameters, found through the listing endpoints."""
    docs = server.json("/api/documents")["datasets"]
    folder = next(d["path"] for d in docs if d["path"].startswith("fuzzy_dedup-") and "/docs/" in d["path"])
    first = next(d["files"][0] for d in docs if d["path"] == folder)
    removed = server.json("/api/removed")["steps"]
    fuzzy = next(s["step"] for s in removed if s["step"].startswith("fuzzy_dedup-"))
    rid = server.json(f"/api/removed?step={q(fuzzy)}&limit=1")["rows"][0]["id"]
    stores = server.json("/api/stores")
    store = stores["stores"][0]["path"]
    training = server.json("/api/training")
    medium = q('split == "medium"')
    return [
        "/",
        "/documents",
        f"/documents?dataset={q(folder)}",
        f"/documents?dataset={q(folder)}&filter={medium}",
        f"/documents/doc?file={q(first)}&row=0",
        "/removed",
        f"/removed?step={q(fuzzy)}",
        f"/removed/pair?step={q(fuzzy)}&id={q(rid)}",
        "/stores",
        f"/stores/view?path={q(store)}",
        f"/stores/doc?path={q(store)}&index=0",
        f"/stores/mixture?path={q(stores['mixtures'][0])}&budget=100000",
        "/training",
        f"/training/run?path={q(training['runs'][0])}",
        f"/training/report?path={q(training['reports'][0])}",
    ]


def test_every_page_and_json_endpoint_answers(ui_server) -> None:
    timings = {}
    for path in _urls(ui_server):
        status, body, seconds = ui_server.get(path)
        assert status == 200 and b"<h1>" in body and b"class=error" not in body, (path, status, body[:300])
        api = "/api/runs" if path == "/" else "/api" + path
        status, body, _ = ui_server.get(api)
        assert status == 200, (api, body[:300])
        assert isinstance(json.loads(body), dict)
        timings[path] = seconds
    assert ui_server.get("/static/ui.js")[0] == 200 and ui_server.get("/static/ui.css")[0] == 200
    print("page seconds:", {k: round(v, 3) for k, v in timings.items()})


def test_runs_page_shows_steps_with_counts_and_reasons(ui_server, ui_root: Path) -> None:
    data = ui_server.json("/api/runs")
    steps = {s["name"]: s for s in data["steps"]}
    assert list(steps)[:3] == ["normalize", "exact_dedup", "fuzzy_dedup"]
    assert {"tokenize", "mixture", "train"} <= set(steps)
    exact = steps["exact_dedup"]
    marker = json.loads((ui_root / exact["path"] / "_STEP.json").read_text())["payload"]["summary"]
    assert (exact["docs_in"], exact["docs_out"]) == (marker["documents_in"], marker["documents_out"])
    assert exact["removed"] == {"exact_duplicate": marker["duplicates_removed"]} and exact["lineage"]
    assert steps["fuzzy_dedup"]["removed"]["fuzzy_duplicate"] == steps["fuzzy_dedup"]["removed_total"] > 0
    assert steps["tokenize"]["tokens"] > 0 and all(s["status"] == "done" for s in data["steps"])


FILTERS = [
    'split in ["medium", "high_actual"] and len(text) > 1500 and dup_count >= 1',
    'split in ["medium", "high_actual"] and len(text) > 1500 and not (lang is not null)',  # a field no file has
]


@pytest.mark.parametrize("text", FILTERS, ids=["fields-present", "field-missing"])
@pytest.mark.parametrize("kind", ["jsonl", "parquet", "vortex"])
def test_filters_give_the_engines_documents(ui_server, ui_root: Path, kind: str, text: str) -> None:
    folder = next(ui_root.glob("exact_dedup-*")).name if kind == "jsonl" else f"copies/{kind}"
    files = sorted(str(p) for p in (ui_root / folder).iterdir() if p.name.startswith("part-"))
    with execution(backend="local", summary=False, progress=False):
        expected = [d["id"] for d in Dataset.from_files(files).filter(parse_filter(text)).collect()]
        everything = [d["id"] for d in Dataset.from_files(files).collect()]
    assert 5 < len(expected) < len(everything)
    got, offset = [], 0
    while True:  # pages of 7: page boundaries fall inside files
        page = ui_server.json(f"/api/documents?dataset={q(folder)}&filter={q(text)}&offset={offset}&limit=7")
        got += [r["id"] for r in page["rows"]]
        if not page["has_more"]:
            break
        offset += 7
    assert got == expected
    # unfiltered paging (footer row counts for parquet/vortex, streaming for jsonl) walks every document once
    got, offset = [], 0
    while True:
        page = ui_server.json(f"/api/documents?dataset={q(folder)}&offset={offset}&limit=50")
        got += [r["id"] for r in page["rows"]]
        if not page["has_more"]:
            break
        offset += 50
    assert got == everything and page["total"] == len(everything)
    # one file of the folder, paged on its own: its documents, in order
    last = sorted(page["file_list"])[-1]
    with execution(backend="local", summary=False, progress=False):
        in_last = [d["id"] for d in Dataset.from_files([str(ui_root / last)]).collect()]
    page = ui_server.json(f"/api/documents?dataset={q(folder)}&file={q(last)}&offset=2&limit=1000")
    assert [r["id"] for r in page["rows"]] == in_last[2:] and {r["_file"] for r in page["rows"]} == {last}
    # a row opened from a filtered page is that document
    page = ui_server.json(f"/api/documents?dataset={q(folder)}&filter={q(text)}&offset=3&limit=1")
    row = page["rows"][0]
    doc = ui_server.json(f"/api/documents/doc?file={q(row['_file'])}&row={row['_row']}&filter={q(text)}")["document"]
    assert doc["id"] == expected[3] and doc["text"] == row["text"]


def test_text_search_and_bad_filters(ui_server, ui_root: Path) -> None:
    folder = next(ui_root.glob("exact_dedup-*")).name
    page = ui_server.json(f"/api/documents?dataset={q(folder)}&q=the&limit=1000")
    assert page["rows"] and all("the" in r["text"] for r in page["rows"])
    bad = q('__import__("os")')
    status, body, _ = ui_server.get(f"/api/documents?dataset={q(folder)}&filter={bad}")
    assert status == 400 and b"expected" in body
    status, body, _ = ui_server.get(f"/documents?dataset={q(folder)}&filter={q('lang ==')}")
    assert status == 400 and b"class=error" in body
    assert ui_server.get("/api/documents?dataset=no/such/folder")[0] == 404


def test_a_removed_document_links_to_its_keeper(ui_server, ui_root: Path) -> None:
    steps = {s["step"].split("-")[0]: s for s in ui_server.json("/api/removed")["steps"]}
    assert steps["exact_dedup"]["removed"]["exact_duplicate"] > 0
    exact = ui_server.json(f"/api/removed?step={q(steps['exact_dedup']['step'])}&reason=exact_duplicate")
    row = exact["rows"][0]
    pair = ui_server.json(f"/api/removed/pair?step={q(exact['step'])}&id={q(row['id'])}")
    assert pair["removed"]["id"] == row["id"] and pair["keeper"]["id"] == row["keeper"] != row["id"]
    assert text_hash(pair["removed"]["text"]) == text_hash(pair["keeper"]["text"])  # an exact duplicate of its keeper
    # the keeper survived the step: it is in the step's own output
    kept_ids = {
        json.loads(line)["id"]
        for p in (ui_root / exact["step"]).glob("part-*.jsonl.zst")
        for line in __import__("zstandard").ZstdDecompressor().stream_reader(p.open("rb")).read().splitlines()
    }
    assert row["keeper"] in kept_ids and row["id"] not in kept_ids
    html = ui_server.get(f"/removed?step={q(exact['step'])}")[1].decode()
    assert f"/removed/pair?step={q(exact['step'], safe='')}" in html.replace("&amp;", "&") or "removed/pair" in html

    fuzzy = ui_server.json(f"/api/removed?step={q(steps['fuzzy_dedup']['step'])}&reason=fuzzy_duplicate&limit=1000")
    assert fuzzy["total"] == steps["fuzzy_dedup"]["total"] > 0
    for row in fuzzy["rows"][:3]:
        pair = ui_server.json(f"/api/removed/pair?step={q(fuzzy['step'])}&id={q(row['id'])}")
        assert pair["keeper"]["id"] == row["keeper"] and pair["jaccard"] >= 0.8  # verified at threshold 0.8
        assert "<mark" in pair["diff"]["kept"] + pair["diff"]["removed"] or pair["jaccard"] == 1.0
        page = ui_server.get(f"/removed/pair?step={q(fuzzy['step'])}&id={q(row['id'])}")[1].decode()
        assert "id=jaccard" in page and "kept-doc" in page and "removed-doc" in page


def test_token_store_and_mixture_pages(ui_server) -> None:
    stores = ui_server.json("/api/stores")
    store = stores["stores"][0]
    view = ui_server.json(f"/api/stores/view?path={q(store['path'])}")
    assert view["documents"] == store["documents"] and sum(b["count"] for b in view["histogram"]) == view["documents"]
    doc = ui_server.json(f"/api/stores/doc?path={q(store['path'])}&index=0")
    assert doc["decoded"] and len(doc["pieces"]) == doc["shown"] == len(doc["ids"])
    from zephyr.tokenize.tokenizer import load_tokenizer

    tokenizer = load_tokenizer("smollm2")
    assert "".join(p["text"] for p in doc["pieces"]) == tokenizer.decode(doc["ids"])  # boundaries lose nothing
    mix = ui_server.json(f"/api/stores/mixture?path={q(stores['mixtures'][0])}&budget=1000000")
    assert abs(sum(c["weight"] for c in mix["components"]) - 1) < 1e-9
    for c in mix["components"]:
        assert c["epochs"] == pytest.approx(c["weight"] * 1_000_000 / c["tokens"], rel=1e-3)
    # without a budget: the recipe's training run on this mixture (2 steps x batch 8 x seq_len 128)
    mix = ui_server.json(f"/api/stores/mixture?path={q(stores['mixtures'][0])}")
    assert mix["budget"] == 2 * 8 * 128 and mix["budget_from"].startswith("training run train-")


def test_training_and_ablation_pages(ui_server) -> None:
    listing = ui_server.json("/api/training")
    run = ui_server.json(f"/api/training/run?path={q(next(p for p in listing['runs'] if p.startswith('train-')))}")
    assert [s for s, _ in run["series"]["loss"]] == [1, 2] and run["end"]["final_loss"] > 0
    report = ui_server.json(f"/api/training/report?path={q(listing['reports'][0])}")
    assert report["verdicts"][0]["verdict"] == "better"
    assert any(d["high"] < 0 for d in report["differences"])
    html = ui_server.get(f"/training/report?path={q(listing['reports'][0])}")[1].decode()
    assert (
        "<svg" in html
        and '<script src="/static/ui.js">' in html
        and "http" not in html.split("<main>")[1].split("href")[0]
    )


def test_live_view_follows_a_running_process(ui_server, ui_root: Path) -> None:
    import subprocess
    import sys
    import time

    proc = subprocess.Popen([sys.executable, str(Path(__file__).with_name("live_run.py")), str(ui_root), "6", "0.6"])
    try:
        seen: list[int] = []
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            live = ui_server.json("/api/runs/live")["live"]
            if live and live["pid"] == proc.pid:
                done = live["jobs"][0]["stages"][0]["shards_done"]
                if not seen or done != seen[-1]:
                    seen.append(done)
                if live["status"] == "succeeded":
                    break
            time.sleep(0.2)
        assert proc.wait(timeout=60) == 0
    finally:
        proc.kill()
    assert seen[-1] == 6 and len(seen) >= 3 and seen == sorted(seen), seen  # the count rose while it ran
    live = ui_server.json("/api/runs/live")["live"]
    retry = live["jobs"][0]["stages"][0]["retries"][0]
    assert retry["worker_pid"] == proc.pid and retry["shard"] == 2 and "planted failure" in retry["error"]
    html = ui_server.get("/fragments/live")[1].decode()
    assert "6/6" in html and "planted failure" in html and str(proc.pid) in html
    # the run stays viewable from the history by its id
    runs = ui_server.json("/api/runs")
    assert live["run_id"] in [r["run_id"] for r in runs["runs"]]
    assert ui_server.json(f"/api/runs?run={q(live['run_id'])}")["live"]["pid"] == proc.pid
    assert ui_server.get("/api/runs/live?run=20000101T000000-1")[0] == 404
    body = ui_server.get("/fragments/runs")[1].decode()  # what the Runs page re-fetches every second
    assert 'id="steps"' in body and "6/6" in body and live["run_id"] in body


def test_lineage_of_a_quality_and_dedup_step_matches_the_marks(ui_server, ui_root: Path) -> None:
    from collections import Counter

    marked = sorted(str(p) for p in (ui_root / "marked").glob("part-*.jsonl.zst"))
    with execution(backend="local", summary=False, progress=False):
        docs = Dataset.from_files(marked).collect()
    expected = Counter(d["filter_reason"] for d in docs if d.get("filter_reason") or d.get("dup_keep") is False)
    assert len(expected) >= 2  # quality rules and exact duplicates
    removed = {s["step"]: s for s in ui_server.json("/api/removed")["steps"]}
    assert removed["quality"]["removed"] == dict(expected)
    # paging one reason across the lineage files (pages of 3) lists each removed document once
    ids, offset = [], 0
    while True:
        page = ui_server.json(f"/api/removed?step=quality&reason=exact_duplicate&offset={offset}&limit=3")
        ids += [r["id"] for r in page["rows"]]
        offset += 3
        if offset >= page["total"]:
            break
    assert sorted(ids) == sorted(d["id"] for d in docs if d.get("filter_reason") == "exact_duplicate")
    # the marked dataset filters by filter_reason exactly like the engine
    text = 'filter_reason == "exact_duplicate"'
    page = ui_server.json(f"/api/documents?dataset=marked&filter={q(text)}&limit=1000")
    assert [r["id"] for r in page["rows"]] == [d["id"] for d in docs if d.get("filter_reason") == "exact_duplicate"]


def test_filter_on_a_nested_quality_signal(ui_server, ui_root: Path) -> None:
    marked = sorted(str(p) for p in (ui_root / "marked").glob("part-*.jsonl.zst"))
    with execution(backend="local", summary=False, progress=False):
        docs = Dataset.from_files(marked).collect()
    words = sorted(d["quality_signals"]["words"] for d in docs)
    cut = words[len(words) // 3]
    expected = [d["id"] for d in docs if d["quality_signals"]["words"] < cut and d["split"] != "medium"]
    text = f'quality_signals.words < {cut} and split != "medium"'
    page = ui_server.json(f"/api/documents?dataset=marked&filter={q(text)}&limit=1000")
    assert 0 < len(expected) < len(docs) and [r["id"] for r in page["rows"]] == expected


def test_zephyr_ui_command_serves_the_root(ui_root: Path) -> None:
    import os
    import subprocess
    import sys
    import time
    import urllib.request

    from ui_helpers import _free_port

    port = _free_port()
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2])}
    proc = subprocess.Popen(
        [sys.executable, "-m", "zephyr.cli", "ui", str(ui_root), "--port", str(port)], env=env, stderr=subprocess.PIPE
    )
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/api/health", timeout=5) as response:
                    assert json.loads(response.read()) == {"ok": True, "root": str(ui_root)}
                    break
            except OSError:
                assert proc.poll() is None and time.monotonic() < deadline, "zephyr ui did not start"
                time.sleep(0.3)
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/", timeout=30) as response:
            assert b"exact_dedup" in response.read()
    finally:
        proc.terminate()
        proc.wait(timeout=30)
    missing = subprocess.run(
        [sys.executable, "-m", "zephyr.cli", "ui", str(ui_root / "nope")],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert missing.returncode == 2 and "does not exist" in missing.stderr


def test_a_memory_root_is_read_through_fsspec(ui_root: Path) -> None:
    """Everything goes through zephyr.fs: a memory:// root (as gs:// or s3:// would) browses and pairs."""
    import fsspec
    from ui_helpers import Server

    fs = fsspec.filesystem("memory")
    exact = next(ui_root.glob("exact_dedup-*"))
    normalize = next(ui_root.glob("normalize-*"))
    for step in (normalize, exact):
        for path in step.rglob("*"):
            if path.is_file():
                fs.pipe(f"/uiroot/{path.relative_to(ui_root)}", path.read_bytes())
    server = Server("memory://uiroot")
    try:
        steps = {s["name"]: s for s in server.json("/api/runs")["steps"]}
        assert steps["exact_dedup"]["removed"]["exact_duplicate"] > 0
        page = server.json(f"/api/documents?dataset={exact.name}&filter={q('dup_count >= 2')}")
        assert page["rows"] and all(r["dup_count"] >= 2 for r in page["rows"])
        row = server.json(f"/api/removed?step={exact.name}&limit=1")["rows"][0]
        pair = server.json(f"/api/removed/pair?step={exact.name}&id={q(row['id'])}")
        assert pair["keeper"]["id"] == row["keeper"] and pair["removed"]["_file"].startswith(normalize.name)
    finally:
        server.stop()
        fs.rm("/uiroot", recursive=True)


def test_token_pieces_keep_multibyte_characters_whole() -> None:
    from zephyr.tokenize.tokenizer import load_tokenizer
    from zephyr.ui.stores import _token_pieces

    tokenizer = load_tokenizer("smollm2")
    text = "héllo wörld 日本語 テキスト 🎉 done"
    ids = tokenizer.hf.encode(text).ids
    pieces = [p["text"] for p in _token_pieces(tokenizer.decode, ids, context=2)]
    assert "".join(pieces) == text and "\ufffd" not in "".join(pieces)
    assert len(pieces) == len(ids) and "" in pieces  # a character split over tokens shows on its last token


def test_values_from_files_are_escaped(ui_server, ui_root: Path) -> None:
    """Documents and records are data: markup in them is shown, never run."""
    import zstandard

    folder = ui_root / "hostile"
    folder.mkdir(exist_ok=True)
    doc = {"id": "<script>alert(1)</script>", "text": "<img src=x onerror=alert(2)>", "split": "<b>x</b>"}
    (folder / "part-00000.jsonl.zst").write_bytes(zstandard.ZstdCompressor().compress(json.dumps(doc).encode() + b"\n"))
    for path in ("/documents?dataset=hostile", "/documents/doc?file=hostile/part-00000.jsonl.zst&row=0"):
        deadline = time.monotonic() + 10  # folder listings are cached for a few seconds (Root.ttl)
        body = ui_server.get(path)[1].decode()
        while "&lt;script&gt;alert(1)" not in body and time.monotonic() < deadline:
            time.sleep(0.5)
            body = ui_server.get(path)[1].decode()
        assert "<script>alert" not in body and "<img src=x" not in body
        assert "&lt;script&gt;alert(1)" in body


def test_steps_from_markers_alone_old_and_new_format(tmp_path: Path) -> None:
    """A root without run records (older runs, other tools): steps come from the _STEP.json markers, in both
    the zephyr.versioning format (payload) and the format written before it (top-level keys)."""
    from zephyr.ui.runs import steps_view
    from zephyr.ui.source import Root
    from zephyr.versioning import write_marker

    summary = {"documents_in": 10, "documents_out": 7, "duplicates_removed": 3}
    write_marker(
        str(tmp_path / "dedup-0123456789" / "_STEP.json"),
        "recipe-step",
        "0123456789abcdef",
        {"name": "dedup", "summary": summary, "seconds": 1.5},
    )
    (tmp_path / "norm-abcdefabcd").mkdir()
    (tmp_path / "norm-abcdefabcd" / "_STEP.json").write_text(
        json.dumps(
            {
                "name": "norm",
                "version": "abcdefabcdef",
                "summary": {"documents_in": 10, "documents_out": 10},
                "seconds": 2.0,
            }
        )
    )
    steps = {s["name"]: s for s in steps_view(Root(str(tmp_path)))}
    assert steps["dedup"]["version"] == "0123456789" and steps["dedup"]["seconds"] == 1.5
    assert (steps["dedup"]["docs_in"], steps["dedup"]["docs_out"], steps["dedup"]["removed"]) == (
        10,
        7,
        {"duplicates": 3},
    )
    assert steps["norm"]["version"] == "abcdefabcd" and steps["norm"]["removed_total"] == 0


def _oracle_lineage(ui_root: Path, doc_id: str) -> list[tuple[str, str, str | None]]:
    """(step folder, reason, keeper) of every lineage row naming `doc_id`, read with pyarrow directly."""
    import pyarrow.parquet as pq

    rows = []
    for part in sorted(ui_root.glob("**/_removed/*.parquet")):
        step = part.parent.parent.relative_to(ui_root).as_posix()
        rows += [(step, r["reason"], r["keeper"]) for r in pq.read_table(part).to_pylist() if r["id"] == doc_id]
    return sorted(rows, key=str)


def test_find_a_document_by_id(ui_server, ui_root: Path) -> None:
    """From an id alone: which step removed it, why, the document kept for it, and its tokens."""
    from html import escape

    from zephyr.tokenize.store import TokenStore

    steps = {s["step"].split("-")[0]: s for s in ui_server.json("/api/removed")["steps"]}
    exact = ui_server.json(f"/api/removed?step={q(steps['exact_dedup']['step'])}&reason=exact_duplicate&limit=1000")
    import pyarrow.parquet as pq

    dedup_parts = [*ui_root.glob("exact_dedup-*/_removed/*.parquet"), *ui_root.glob("fuzzy_dedup-*/_removed/*.parquet")]
    removed_ids = {r["id"] for part in dedup_parts for r in pq.read_table(part, columns=["id"]).to_pylist()}
    row = next(r for r in exact["rows"] if r["keeper"] not in removed_ids)  # a keeper that reached the stores

    found = ui_server.json(f"/api/find?id={q(row['id'])}")
    assert sorted(((r["step"], r["reason"], r["keeper"]) for r in found["removed"]), key=str) == _oracle_lineage(
        ui_root, row["id"]
    )
    assert (exact["step"], "exact_duplicate", row["keeper"]) in _oracle_lineage(ui_root, row["id"])
    assert found["document"]["id"] == row["id"] and found["tokens"] == []  # removed before tokenize

    kept = ui_server.json(f"/api/find?id={q(row['keeper'])}")
    assert [r for r in kept["removed"] if r["step"].startswith(("exact_dedup", "fuzzy_dedup"))] == []
    oracle = []
    for store in ui_server.json("/api/stores")["stores"]:
        index = TokenStore(ui_root / store["path"]).document_index().to_pylist()
        oracle += [(store["path"], d["document"]) for d in index if d["id"] == row["keeper"]]
    assert [(t["store"], t["index"]) for t in kept["tokens"]] == oracle and len(oracle) == 1
    tokens = ui_server.json(f"/api/stores/doc?path={q(oracle[0][0])}&index={oracle[0][1]}")
    assert tokens["tokens"] == kept["tokens"][0]["tokens"] > 0

    # the pair page no longer needs the step; an id nothing knows is a clear "not found"
    pair = ui_server.json(f"/api/removed/pair?id={q(row['id'])}")
    assert pair["step"] in {s for s, _, _ in _oracle_lineage(ui_root, row["id"])}
    assert pair["keeper"]["id"] == row["keeper"]
    missing = ui_server.json("/api/find?id=no-such-document")
    assert missing == {"id": "no-such-document", "removed": [], "tokens": [], "document": None}
    status, body, _ = ui_server.get("/api/find")
    assert status == 400 and b"id" in body

    html = ui_server.get(f"/find?id={q(row['id'])}")[1].decode()
    assert 'id="find-removed"' in html and "exact_duplicate" in html and escape(row["keeper"]) in html
    assert "id=find-box" in ui_server.get("/stores")[1].decode()  # the search box is on every page
