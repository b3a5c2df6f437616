"""The `zephyr` command line: flags, errors, scripts written the usual way (issues #17 items 5, 9, 10, 16; #19)."""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from zephyr.cli import build_parser
from zephyr.commands import add_command
from zephyr.engine.options import ZephyrArgumentParser

REPO = Path(__file__).resolve().parents[1]


def _zephyr(*args: str, cwd: Path | None = None, timeout: int = 180) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    return subprocess.run(
        [sys.executable, "-m", "zephyr.cli", *args],
        env=env,
        check=False,
        capture_output=True,
        text=True,
        timeout=timeout,
        cwd=cwd,
    )


def _subcommands() -> dict[str, argparse.ArgumentParser]:
    parser = build_parser()
    action = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    return dict(action.choices)


def test_version():
    result = _zephyr("--version")
    assert result.returncode == 0 and result.stdout.startswith("zephyr ")


def test_every_flag_has_help_every_subcommand_examples_and_verbosity():
    subcommands = _subcommands()
    assert {"run", "tokenize", "inspect", "verify", "train", "ablate", "datashop", "export"} <= set(subcommands)
    for name, sub in subcommands.items():
        flags = {s for a in sub._actions for s in a.option_strings}
        assert {"-q", "--quiet", "-v", "--verbose"} <= flags, name
        # a command line to copy, not only a mention: ablate's config example once named `zephyr ablate` in a
        # sentence, and that hid the command examples kept for it elsewhere
        assert re.search(rf"^examples:\n  zephyr {name}\b", sub.epilog or "", re.M), f"{name} has no examples"
        for action in sub._actions:
            if action.option_strings and action.help != argparse.SUPPRESS:
                assert action.help, f"zephyr {name} {action.option_strings[0]} has no help"
        assert not sub.allow_abbrev, name


def _export(args: argparse.Namespace) -> int:
    """export a dataset somewhere

    Write the dataset to OUT, one file per shard.
    Reruns skip written files.

    examples:
      zephyr export-x data out      # one file per shard

    Files are replaced atomically.
    """
    return 0


def test_a_command_help_is_its_docstring():
    parser = ZephyrArgumentParser(prog="zephyr")
    sub = add_command(parser.add_subparsers(dest="command"), "export-x", _export)
    assert sub.description == "Write the dataset to OUT, one file per shard.\nReruns skip written files."
    assert (
        sub.epilog
        == "examples:\n  zephyr export-x data out      # one file per shard\n\nFiles are replaced atomically."
    )
    assert parser.parse_args(["export-x"]).func is _export
    assert "  export-x  export a dataset somewhere" in parser.format_help()


def test_a_command_without_examples_is_refused():
    def run(args: argparse.Namespace) -> int:
        """export a dataset somewhere

        Write the dataset to OUT.
        """
        return 0

    with pytest.raises(ValueError, match="'export-x'.*no 'examples:' section.*docstring of .*run"):
        add_command(ZephyrArgumentParser(prog="zephyr").add_subparsers(), "export-x", run)


def test_backend_means_the_execution_backend_everywhere():
    for name, sub in _subcommands().items():
        for action in sub._actions:
            if "--backend" in action.option_strings:
                assert set(action.choices) == {"local", "processes", "ray"}, name
            if "--engine" in action.option_strings:
                assert action.help == argparse.SUPPRESS, f"{name}: --engine is only a hidden old alias"


SCRIPT_WITH_OWN_FLAGS = """
import argparse, json
from zephyr.engine.context import current_config

def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--workers", type=int)
    parser.add_argument("--add", type=int)
    parser.add_argument("--dry", action="store_true")
    args = parser.parse_args()
    config = current_config()
    print(json.dumps({"script": vars(args), "backend": config.backend, "workers": config.workers,
                      "dry_run": config.dry_run}))
"""


def test_flags_after_the_script_belong_to_the_script(tmp_path):
    script = tmp_path / "own_flags.py"
    script.write_text(SCRIPT_WITH_OWN_FLAGS)
    result = _zephyr(
        "run", "--backend", "local", "--workers", "3", str(script), "--workers", "7", "--add", "3", "--dry"
    )
    assert result.returncode == 0, result.stderr
    seen = json.loads(result.stdout.strip().splitlines()[-1])
    assert seen == {"script": {"workers": 7, "add": 3, "dry": True}, "backend": "local", "workers": 3, "dry_run": False}


def test_misplaced_engine_flag_is_named(tmp_path):
    script = tmp_path / "own_flags.py"
    script.write_text(SCRIPT_WITH_OWN_FLAGS)
    result = _zephyr("run", str(script), "--backend", "ray")
    assert result.returncode == 2
    assert "engine options go before the script path" in result.stderr


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (["run", "README.md"], "not a Python script"),
        (["run", "--memory-per-worker", "lots", "x.py"], "cannot read 'lots' as a size"),
        (["run", "--scratch", "/proc/nope", "x.py"], "cannot use '/proc/nope' as scratch space"),
        (["run", "--workers", "0", "x.py"], "--workers: must be at least 1"),
        (["run", "--workers", "-1", "x.py"], "--workers: must be at least 1, got -1"),  # was "unknown option '-1'"
        (["run", "--add", "3", "x.py"], "unknown engine option '--add'"),
        (["run", "recipes/nemotron_cc.py", "--weights", "medium=abc"], "--weights: medium='abc' is not a number"),
        (["tokenize", "a.jsonl", "out", "--workers", "0"], "--workers: must be at least 1"),
    ],
)
def test_usage_errors_are_one_line_with_exit_code_2(args, needle):
    result = _zephyr(*args, cwd=REPO)
    assert result.returncode == 2, result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and needle in lines[0], result.stderr
    assert "Traceback" not in result.stderr


def test_missing_store_in_a_train_config_is_one_line(tmp_path):
    config = tmp_path / "train.yaml"
    config.write_text(
        f"steps: 2\noutput_dir: {tmp_path / 'run'}\n"
        f"data:\n  train: {{web: [{tmp_path / 'no_store'}, 1.0]}}\n  seq_len: 16\n  batch_size: 2\n"
    )
    result = _zephyr("train", str(config))
    assert result.returncode == 2
    (line,) = result.stderr.strip().splitlines()
    assert "data.train.web" in line and "not a token store" in line and "zephyr tokenize" in line


def test_recipe_input_glob_matching_nothing_is_one_line_and_exit_1(tmp_path):
    result = _zephyr(
        "run",
        "--backend",
        "local",
        "--scratch",
        str(tmp_path / "scratch"),
        str(REPO / "recipes" / "nemotron_cc.py"),
        "--input",
        str(tmp_path / "none" / "*.jsonl.zst"),
        "--output",
        str(tmp_path / "out"),
        "--no-train",
        cwd=tmp_path,
    )
    assert result.returncode == 1
    errors = [line for line in result.stderr.splitlines() if "error" in line]
    assert len(errors) == 1 and "BadInputError: no files match" in errors[0]
    assert "Traceback" not in result.stderr and 'File "' not in result.stderr  # no internal traceback (#17.16)


def test_verbose_shows_the_traceback_of_a_zephyr_error(tmp_path):
    script = tmp_path / "bad.py"
    script.write_text(
        f"from zephyr import Dataset\ndef main():\n    Dataset.from_files({str(tmp_path / 'x*.jsonl')!r}).collect()\n"
    )
    quiet = _zephyr("run", "--backend", "local", str(script), cwd=tmp_path)
    verbose = _zephyr("-v", "run", "--backend", "local", str(script), cwd=tmp_path)
    assert quiet.returncode == verbose.returncode == 1
    assert "Traceback" not in quiet.stderr and "Traceback" in verbose.stderr


TOP_LEVEL_PIPELINE = """
from zephyr import Dataset
from zephyr.engine.context import current_config

result = Dataset.from_list([{"v": i} for i in range(10)], num_shards=2).map(lambda r: r["v"] + 1).collect()
print("RESULT", sum(result), current_config().backend)
"""


def test_plain_python_script_without_main_guard_runs_on_processes(tmp_path):
    script = tmp_path / "unguarded.py"
    script.write_text(TOP_LEVEL_PIPELINE)
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    result = subprocess.run(
        [sys.executable, str(script)], env=env, check=False, capture_output=True, text=True, timeout=180, cwd=tmp_path
    )
    assert result.returncode == 0, result.stderr[-3000:]
    assert "RESULT 55 processes" in result.stdout
    assert "bootstrapping phase" not in result.stderr and "Traceback" not in result.stderr


def test_zephyr_run_on_a_script_without_main_applies_the_engine_options(tmp_path):
    script = tmp_path / "unguarded.py"
    script.write_text(TOP_LEVEL_PIPELINE)
    result = _zephyr("run", "--backend", "local", "--scratch", str(tmp_path / "scratch"), str(script), cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert result.stdout.count("RESULT 55 local") == 1  # ran once, under --backend local


def test_install_models_reports_the_pinned_model_packages():
    from zephyr.install_models import MODEL_PACKAGES, missing_model_packages

    makefile = (REPO / "Makefile").read_text()
    for name, version in MODEL_PACKAGES.items():
        assert f'"{name}=={version}"' in makefile  # one set of pins
    result = _zephyr("install-models", "--check")
    assert result.returncode == (1 if missing_model_packages() else 0)
    assert all(f"{name}==" in result.stdout for name in MODEL_PACKAGES)


def test_subcommands_print_one_summary_not_one_per_engine_job(tmp_path):
    (tmp_path / "a.jsonl").write_text('{"id": "a", "text": "hello world"}\n{"id": "b", "text": "two"}\n')
    (tmp_path / "b.jsonl").write_text('{"id": "c", "text": "third document"}\n')
    result = _zephyr("tokenize", str(tmp_path / "*.jsonl"), str(tmp_path / "store"), "--backend", "local", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    output = result.stdout + result.stderr
    assert output.count("┏") == 1 and "zephyr tokenize succeeded" in output, output
    assert "zephyr job summary" not in output and "zephyr run summary" not in output
    quiet = _zephyr(
        "tokenize", "-q", str(tmp_path / "*.jsonl"), str(tmp_path / "store2"), "--backend", "local", cwd=tmp_path
    )
    assert quiet.returncode == 0 and "┏" not in quiet.stdout + quiet.stderr


def test_every_engine_option_with_a_value_is_split_before_the_script(tmp_path):
    from zephyr.cli import _parse

    parser = build_parser()
    run = _subcommands()["run"]
    for action in run._actions:
        if action.option_strings and action.nargs != 0 and action.dest not in ("help",):
            flag = action.option_strings[-1]
            values = {"backend": "local", "memory_per_worker": "64MB", "scratch": str(tmp_path), "ray_mode": "tasks"}
            value = values.get(action.dest, "1")
            if action.dest == "address":
                value = "auto"
            args = _parse(parser, ["run", flag, value, "script.py", "--mine", "2"])
            assert args.script == "script.py" and args.args == ["--mine", "2"], flag


def test_a_usage_error_of_the_script_leaves_no_run_record(tmp_path):
    """The engine flag after the script (meant as a dry run) wrote ./.zephyr/_runs/<id>.json (status failed)."""
    env = {k: v for k, v in os.environ.items() if k not in ("ZEPHYR_RUNS", "ZEPHYR_SCRATCH")}
    result = subprocess.run(
        [sys.executable, "-m", "zephyr.cli", "run", str(REPO / "recipes" / "nemotron_cc.py"), "--dry-run"]
        + ["--output", "X"],
        env={**env, "PYTHONPATH": str(REPO)},
        capture_output=True,
        text=True,
        timeout=180,
        cwd=tmp_path,
    )
    assert result.returncode == 2 and "engine options go before the script path" in result.stderr
    assert list(tmp_path.iterdir()) == []


def test_zephyr_verbosity_from_the_environment_is_kept_without_q_or_v(tmp_path):
    """`ZEPHYR_VERBOSITY=-1 zephyr run ...` printed stage lines, the summary table and 'succeeded'."""
    script = tmp_path / "quiet.py"
    script.write_text(
        "from zephyr import Dataset\n\ndef main():\n    Dataset.from_list([{'a': 1}], num_shards=1).collect()\n"
    )
    env = {**os.environ, "PYTHONPATH": str(REPO), "ZEPHYR_VERBOSITY": "-1"}
    result = subprocess.run(
        [sys.executable, "-m", "zephyr.cli", "run", "--backend", "local", str(script)],
        env=env,
        capture_output=True,
        text=True,
        timeout=180,
        cwd=tmp_path,
    )
    assert result.returncode == 0 and result.stderr == "" and result.stdout == "", result.stderr
