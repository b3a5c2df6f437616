"""How `python-docs.jsonl.zst` was made: the prose the embedded Nemotron-CC sample is cut from.

    python recipes/sample_text/extract.py recipes/sample_text/python-docs.jsonl.zst   # with CPython 3.11.7

The sample used to cut its documents from the READMEs of whatever packages were installed, so two machines
made two different samples (186 / 160 exact / near duplicates removed here, 190 / 156 and 198 / 153
elsewhere). It now reads only this file, shipped with the project, so every machine makes the same one.
Nothing else runs this script: it documents where the text came from, and remakes the file byte for byte
from CPython 3.11.7's standard library.

The text: every topic of the Python Language Reference that `pydoc` ships (`pydoc_data/topics.py`), and the
docstrings (over 120 characters) of standard-library modules, all under the PSF License (LICENSE-Python.txt).
Modules whose source carries a notice of its own (another author's copyright or license terms) are left
out. 1.3 MB of English prose and code, 292 KB compressed: about 460 distinct long passages and 1,400 short
ones, what the sample's quality splits are cut from.
"""

from __future__ import annotations

import ast
import sys
import sysconfig
from pathlib import Path

import orjson
import zstandard

# Modules read for their docstrings, in this order: the most documented modules of the standard library
# without a notice of their own, up to 1.3 MB of text with the reference topics.
MODULES = (
    "aifc",
    "argparse",
    "asyncio/base_events",
    "asyncio/events",
    "asyncio/futures",
    "asyncio/locks",
    "asyncio/protocols",
    "asyncio/sslproto",
    "asyncio/streams",
    "asyncio/tasks",
    "asyncio/transports",
    "asyncio/unix_events",
    "base64",
    "bdb",
    "bz2",
    "cgi",
    "cmd",
    "code",
    "codeop",
    "collections/__init__",
    "collections/__init__",
    "compileall",
    "configparser",
    "contextlib",
    "dataclasses",
    "datetime",
    "difflib",
    "dis",
    "distutils/ccompiler",
    "distutils/cmd",
    "distutils/core",
    "distutils/dist",
    "distutils/extension",
    "distutils/text_file",
    "distutils/util",
    "distutils/version",
    "email/headerregistry",
    "email/policy",
    "enum",
    "fileinput",
    "fractions",
    "ftplib",
    "graphlib",
    "gzip",
    "http/client",
    "http/cookiejar",
    "http/server",
    "imaplib",
    "importlib/abc",
    "inspect",
    "json/__init__",
    "json/__init__",
    "json/decoder",
    "json/encoder",
    "locale",
    "lzma",
    "mimetypes",
    "nntplib",
    "os",
    "pathlib",
    "pdb",
    "pickle",
    "pickletools",
    "pkgutil",
    "platform",
    "poplib",
    "py_compile",
    "pyclbr",
    "pydoc",
    "queue",
    "random",
    "sched",
    "selectors",
    "shelve",
    "shutil",
    "site",
    "site-packages/isympy",
    "site-packages/typing_extensions",
    "site-packages/typing_inspect",
    "site-packages/xmltodict",
    "smtplib",
    "socket",
    "socketserver",
    "ssl",
    "statistics",
    "sunau",
    "telnetlib",
    "tempfile",
    "threading",
    "timeit",
    "tkinter/__init__",
    "tkinter/__init__",
    "tkinter/dnd",
    "tkinter/tix",
    "tkinter/ttk",
    "tokenize",
    "traceback",
    "typing",
    "urllib/parse",
    "urllib/request",
    "uuid",
    "wave",
    "weakref",
    "wsgiref/handlers",
    "xmlrpc/server",
    "zipfile",
    "zipimport",
)
_OWN_NOTICE = ("copyright", "permission to use", "licensed under", "license:")


def module_docstrings(root: Path, module: str) -> str | None:
    """The module's docstrings over 120 characters, joined by blank lines; None when its source carries a
    notice of its own (its header names another copyright or license)."""
    source = (root / f"{module}.py").read_text(encoding="utf-8")
    header = source[:4000].lower()
    if any(words in header for words in _OWN_NOTICE):
        return None
    tree = ast.parse(source)
    kinds = ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef
    parts = [ast.get_docstring(node) for node in ast.walk(tree) if isinstance(node, kinds)]
    return "\n\n".join(p for p in parts if p and len(p) > 120)


def extract() -> list[dict[str, str]]:
    from pydoc_data.topics import topics

    version = ".".join(map(str, sys.version_info[:3]))
    records = [
        {"source": f"CPython {version} Lib/pydoc_data/topics.py: {name}", "text": text}
        for name, text in sorted(topics.items())
    ]
    root = Path(sysconfig.get_paths()["stdlib"])
    for module in MODULES:
        text = module_docstrings(root, module)
        if text:
            records.append({"source": f"CPython {version} Lib/{module}.py docstrings", "text": text})
    return records


def main(output: str) -> None:
    if sys.version_info[:3] != (3, 11, 7):
        print(f"note: the shipped file was made with CPython 3.11.7; this is {sys.version.split()[0]}")
    payload = b"".join(orjson.dumps(r) + b"\n" for r in extract())
    Path(output).write_bytes(zstandard.ZstdCompressor(level=19).compress(payload))
    print(f"{output}: {len(payload):,} bytes of JSON lines, {Path(output).stat().st_size:,} compressed")


if __name__ == "__main__":
    main(sys.argv[1])
