"""Helpers of the UI tests and benchmarks/ui_pages.py: the recipe loader, an ablation report written by
zephyr.ablate.report from per-seed figures, and a real uvicorn server on 127.0.0.1 in a thread."""

from __future__ import annotations

import importlib.util
import json
import math
import socket
import sys
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def _load_recipe():
    name = "zephyr_recipe_nemotron_cc_under_ui_test"
    if name not in sys.modules:
        spec = importlib.util.spec_from_file_location(name, REPO / "recipes" / "nemotron_cc.py")
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        spec.loader.exec_module(module)
    return sys.modules[name]


def _write_ablation_report(out: Path) -> None:
    from zephyr.ablate.config import AblationConfig, Component, MixtureSpec, TrainSettings
    from zephyr.ablate.report import build_report, write_report
    from zephyr.ablate.runner import AblationPlan, ResolvedMixture, RunResult

    base = MixtureSpec("baseline", {"web": Component("w", 1.0)})
    cand = MixtureSpec("plus_code", {"web": Component("w", 0.5), "code": Component("c", 0.5)}, "baseline + code at 50%")
    cfg = AblationConfig(
        output_dir=str(out),
        baseline=base,
        candidates=(cand,),
        eval={"web": "w/validation"},
        train=TrainSettings(steps=20),
        seeds=(0, 1, 2),
    )
    mixtures = tuple(
        ResolvedMixture(m.name, m.derivation, {d: (c.store, c.weight) for d, c in m.components.items()})
        for m in cfg.mixtures
    )
    plan = AblationPlan(cfg, mixtures, (), "tok", 1024, 20, 20 * 256 * 8)
    losses = {
        ("baseline", 0): 3.0,
        ("baseline", 1): 3.1,
        ("baseline", 2): 2.95,
        ("plus_code", 0): 2.8,
        ("plus_code", 1): 2.85,
        ("plus_code", 2): 2.7,
    }
    results = []
    for (mixture, seed), loss in losses.items():
        run_dir = out / "runs" / mixture / f"seed{seed}"
        run_dir.mkdir(parents=True)
        lines = [
            {"step": s, "eval/web/loss": loss + 2.0 / s, "eval/web/bpb": (loss + 2.0 / s) / math.log(2) / 4}
            for s in (5, 10, 15, 20)
        ]
        (run_dir / "metrics.jsonl").write_text("\n".join(json.dumps(x) for x in lines) + "\n")
        results.append(
            RunResult(
                mixture,
                seed,
                "trained",
                20,
                loss,
                {"web": {"loss": loss, "bpb": loss / math.log(2) / 4}},
                str(run_dir / "metrics.jsonl"),
                None,
                1.0,
                1000.0,
                str(run_dir),
                "fp",
            )
        )
    write_report(build_report(plan, results), out / "report")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Server:
    """A real uvicorn server in a thread; `get` returns (status, body, seconds)."""

    def __init__(self, root: Path | str) -> None:
        import uvicorn

        from zephyr.ui import create_app

        self.port = _free_port()
        self.base = f"http://127.0.0.1:{self.port}"
        self.server = uvicorn.Server(
            uvicorn.Config(create_app(str(root)), host="127.0.0.1", port=self.port, log_level="warning")
        )
        self.thread = threading.Thread(target=self.server.run, daemon=True)
        self.thread.start()
        deadline = time.monotonic() + 30
        while not self.server.started:
            if time.monotonic() > deadline or not self.thread.is_alive():
                raise RuntimeError(f"the UI server did not start on port {self.port}")
            time.sleep(0.05)

    def get(self, path: str) -> tuple[int, bytes, float]:
        start = time.perf_counter()
        try:
            with urllib.request.urlopen(self.base + path, timeout=60) as response:
                body = response.read()
                status = response.status
        except urllib.error.HTTPError as error:
            body, status = error.read(), error.code
        return status, body, time.perf_counter() - start

    def json(self, path: str) -> dict:
        status, body, _ = self.get(path)
        assert status == 200, (path, status, body[:500])
        return json.loads(body)

    def stop(self) -> None:
        self.server.should_exit = True
        self.thread.join(timeout=10)
