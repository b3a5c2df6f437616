"""Fingerprints cover what a function reads (issue #28 item 2): the module globals its code names,
recursively through the helpers and classes of its script; defaults, closures, partial arguments and
bound instances; installed libraries by name and version. What cannot be described makes the work rerun,
with one line saying why, never silently equal."""

from __future__ import annotations

import functools
import importlib.util
import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import orjson
import pytest

import zephyr
from zephyr import Dataset, execution
from zephyr.versioning import Undescribable, describe, fingerprint, undescribable

ROOT = Path(zephyr.__file__).resolve().parents[1]  # the zephyr under test, for the scripts it runs

MODULE = """
FACTOR = 2
TABLE = {"a": [1, 2], "b": (3, 4)}


def helper(x):
    return x * FACTOR


class Scale:
    offset = 1

    def __init__(self, by):
        self.by = by

    def apply(self, x):
        return helper(x) * self.by + self.offset


def stage(record):
    return Scale(1).apply(record["x"]) + TABLE["a"][0]
"""


def _module(tmp_path: Path, name: str, source: str = MODULE):
    """A user module (a script beside the project, not installed) loaded from its own file."""
    path = tmp_path / f"{name}.py"
    path.write_text(textwrap.dedent(source))
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # importable by name, as a script's module is (pickle finds its classes)
    spec.loader.exec_module(module)
    return module


def test_a_change_of_anything_the_function_reads_changes_its_fingerprint(tmp_path):
    module = _module(tmp_path, "script_a")
    before = fingerprint(module.stage)
    assert fingerprint(_module(tmp_path, "script_b").stage) == before  # same code under another module name

    module.FACTOR = 3  # a constant a helper reads
    assert fingerprint(module.stage) != before
    module.FACTOR = 2
    assert fingerprint(module.stage) == before

    module.TABLE["a"][0] = 5  # the data a constant points to
    assert fingerprint(module.stage) != before
    module.TABLE["a"][0] = 1

    exec("def helper(x):\n    return x * FACTOR + 0\n", module.__dict__)  # a helper function of the script
    assert fingerprint(module.stage) != before

    changed = _module(tmp_path, "script_c", MODULE.replace("* self.by + self.offset", "* self.by - self.offset"))
    assert fingerprint(changed.stage) != before  # a method of a class of the script
    changed = _module(tmp_path, "script_d", MODULE.replace("offset = 1", "offset = 2"))
    assert fingerprint(changed.stage) != before  # a class attribute


def test_defaults_closures_partials_and_bound_instances_count():
    def scaled(x, factor=2, *, shift=0):
        return x * factor + shift

    def other_default(x, factor=3, *, shift=0):
        return x * factor + shift

    def other_kwdefault(x, factor=2, *, shift=1):
        return x * factor + shift

    assert len({fingerprint(f) for f in (scaled, other_default, other_kwdefault)}) == 3
    assert fingerprint(functools.partial(scaled, factor=2)) != fingerprint(functools.partial(scaled, factor=4))

    class Counter:
        def __init__(self, n):
            self.n = n

        def add(self, x):
            return x + self.n

    assert fingerprint(Counter(1).add) == fingerprint(Counter(1).add)
    assert fingerprint(Counter(1).add) != fingerprint(Counter(2).add)
    mapping = {"a": 1}
    before = fingerprint(mapping.get)  # a bound builtin reads its owner
    mapping["a"] = 2
    assert fingerprint(mapping.get) != before


def test_installed_code_is_identified_by_name_and_version_not_described_inside():
    described = describe(json.dumps)
    assert described[:3] == ["json", "dumps", f"python=={sys.version.split()[0]}"]

    def uses_numpy(x):
        return np.sqrt(x)

    reads = describe(uses_numpy)[-1]
    assert reads == {"np": ["module", "numpy", f"numpy=={np.__version__}"]}
    assert describe(Dataset)[0] == "class" and describe(Dataset)[3].startswith("zephyr==")


def test_what_cannot_be_described_is_never_silently_equal(tmp_path, caplog):
    handle = open(tmp_path / "f.txt", "w")  # noqa: SIM115 - an open file held by a stage function
    try:

        def reads_a_file(record):
            return handle.write(str(record))

        reasons = undescribable(describe(reads_a_file))
        assert len(reasons) == 1 and "reads_a_file" in reasons[0] and "TextIOWrapper" in reasons[0], reasons
        code = "from zephyr.versioning import fingerprint; print(fingerprint(open(__file__)))"
        runs = {
            subprocess.run(
                [sys.executable, "-c", code.replace("__file__", repr(str(tmp_path / "f.txt")))],
                capture_output=True,
                text=True,
                env={**os.environ, "PYTHONPATH": str(ROOT)},
            ).stdout
            for _ in range(2)
        }
        assert len(runs) == 2, runs  # unique per process: no work is reused by it
    finally:
        handle.close()


def test_describing_is_bounded():
    class Node:
        def __init__(self, i):
            self.i = i

    many = [Node(i) for i in range(20_000)]
    reasons = undescribable(describe(many))
    assert reasons and "reaches more than" in reasons[0]
    deep: list = []
    for _ in range(500):
        deep = [deep, Node(0)]
    assert any("nested deeper" in r for r in undescribable(describe(deep)))
    assert isinstance(Undescribable("x"), Undescribable)


SCRIPT = """
import os, sys
from zephyr import Dataset, execution

FACTOR = 2


def helper(x):
    return x * FACTOR


def scale(record):
    if os.environ.get("FAIL_AT") == str(record["i"]):
        raise RuntimeError("planned failure")
    return {"i": record["i"], "v": helper(record["i"])}


if __name__ == "__main__":
    backend, scratch, out = sys.argv[1:4]
    with execution(backend=backend, workers=2, scratch=scratch, max_user_retries=0, progress=False, summary=False):
        records = Dataset.from_list([{"i": i} for i in range(100)], num_shards=10)
        records.map(scale).write_jsonl(out + "/part-{shard}.jsonl")
"""


def _run(script: Path, tmp_path: Path, backend: str, fail_at: str | None) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    env.pop("FAIL_AT", None)
    if fail_at is not None:
        env["FAIL_AT"] = fail_at
    return subprocess.run(
        [sys.executable, str(script), backend, str(tmp_path / "scratch"), str(tmp_path / "out")],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )


@pytest.mark.parametrize(
    ("backend", "edit"), [("local", ("FACTOR = 2", "FACTOR = 3")), ("processes", ("x * FACTOR", "x * 3"))]
)
def test_a_rerun_after_a_change_of_a_global_recomputes_the_finished_shards(tmp_path, backend, edit):
    """The issue's case: shards a failed run finished were reused with the old FACTOR (sum 10,645 instead of
    14,850, exit 0). Also when the change is in a helper function of the script."""
    script = tmp_path / "scale.py"
    script.write_text(SCRIPT)
    failed = _run(script, tmp_path, backend, fail_at="75")
    assert failed.returncode != 0 and "planned failure" in failed.stderr
    assert list((tmp_path / "scratch").rglob("*.done")), "the failed run checkpointed no shard"
    script.write_text(SCRIPT.replace(*edit))
    rerun = _run(script, tmp_path, backend, fail_at=None)
    assert rerun.returncode == 0, rerun.stderr
    values = [
        orjson.loads(line)["v"]
        for part in (tmp_path / "out").glob("part-*.jsonl")
        for line in part.read_bytes().splitlines()
    ]
    assert len(values) == 100 and sum(values) == 3 * sum(range(100)) == 14_850


def test_a_stage_reading_an_open_file_reruns_its_shards_with_a_line_saying_why(tmp_path, capsys):
    source = tmp_path / "lines.txt"
    source.write_text("".join(f"{i}\n" for i in range(10)))
    calls = tmp_path / "calls"
    calls.mkdir()

    def run(fail: bool) -> None:
        with open(
            source
        ) as handle:  # read-only files pickle (cloudpickle reads them), but say nothing of their content

            def tag(record):
                if fail and record == 7:
                    raise RuntimeError("planned failure")
                (calls / f"{record}-{os.getpid()}-{len(list(calls.iterdir()))}").touch()
                return {"i": record, "first": handle.name}

            with execution(
                backend="local", scratch=str(tmp_path / "scratch"), max_user_retries=0, progress=False, summary=False
            ):
                Dataset.from_list(list(range(10)), num_shards=10).map(tag).collect()

    with pytest.raises(Exception, match="planned failure"):
        run(fail=True)
    finished = len(list(calls.iterdir()))
    assert finished >= 1
    run(fail=False)
    assert len(list(calls.iterdir())) == finished + 10  # every shard ran again: none was reused
    assert "checkpoints not reused, it runs in full" in capsys.readouterr().err


def test_caches_a_class_gathers_as_it_is_used_do_not_count(tmp_path):
    """Pickling an instance adds `__slotnames__` to its class: the nemotron recipe's steps got new versions
    after their first run in a process until such caches were left out."""
    import pickle

    module = _module(tmp_path, "script_e", MODULE + "\n\ndef make(r):\n    return Scale(2).apply(r)\n")
    before = fingerprint(module.make)
    pickle.dumps(module.Scale(3))
    assert "__slotnames__" in vars(module.Scale) and fingerprint(module.make) == before


CLASSES = """
import enum, functools, typing
from dataclasses import dataclass, field


class Color(enum.Enum):
    RED = 1
    BLUE = 2


class Point(typing.NamedTuple):
    x: int
    y: int = 0


class Slotted:
    __slots__ = ("a",)

    def __init__(self, a):
        self.a = a


class Props:
    scale = 2

    def __init__(self, v):
        self.v = v

    @property
    def doubled(self):
        return self.v * self.scale

    @functools.cached_property
    def tripled(self):
        return self.v * 3

    @classmethod
    def make(cls, v):
        return cls(v)

    @staticmethod
    def helper(x):
        return x + 1


@dataclass
class Bag:
    items: list = field(default_factory=list)

    def total(self):
        return sum(self.items)


def uses_all(r):
    return Props.make(r).doubled + Slotted(1).a + Color.RED.value + Point(1).x + Bag([1]).total()
"""


def test_every_kind_of_class_member_is_described(tmp_path):
    """Properties, cached properties, class and static methods, slots, enums, named tuples, dataclasses:
    described by what they compute, never undescribable (a property once made a stage rerun every time)."""
    module = _module(tmp_path, "classes_a", CLASSES)
    assert undescribable(describe(module.uses_all)) == []
    for instance in (module.Props(2), module.Slotted(3), module.Color.RED, module.Point(1, 2), module.Bag([1])):
        assert undescribable(describe(instance)) == [], instance
    before = fingerprint(module.uses_all)
    for old, new in (("self.v * self.scale", "self.v + self.scale"), ("self.v * 3", "self.v * 4"), ("x + 1", "x + 2")):
        changed = _module(tmp_path, f"classes_{abs(hash(new))}", CLASSES.replace(old, new))
        assert fingerprint(changed.uses_all) != before, new
