"""DOM subtree -> plain text or Markdown, in one walk (the last step of `zephyr.operators.extract`).

Block elements become separate blocks; inline runs are whitespace-normalized. Markdown keeps headings
(`#`), ordered and unordered lists (nested by indentation), data tables (pipe tables; layout tables
with nested blocks are walked as blocks instead), code blocks (fenced), inline code and block quotes
(`> `). Plain text keeps the same blocks without markup. Images, comments and scripts are skipped.
The walk is iterative, so pathologically deep DOMs cannot hit Python's recursion limit.
"""

from __future__ import annotations

import sys
from typing import Any

from zephyr.native import optional_kernel

__all__ = ["render_blocks", "normalized_text", "TAG_NAMES", "learn_tag"]

# Tag names by lexbor tag id, learned as pages are read. `node.tag` decodes the element's name into a new
# str on every call (~90 ns, and the set lookups that follow hash it again); hot loops read
# `TAG_NAMES.get(node.tag_id) or learn_tag(node)` (~35 ns, one interned str per tag). Only small ids are
# kept: the tags lexbor knows have fixed small ids, custom elements get per-document ids (addresses). A
# tag id shared by an HTML name and an SVG camelCase one (foreignobject, foreignObject) may hand back
# either spelling: every set these modules test holds lower-case HTML names only, so no test changes.
TAG_NAMES: dict[int, str] = {}
_FIXED_TAG_IDS = 1 << 16


def learn_tag(node) -> str | None:
    """`node.tag`, remembered in `TAG_NAMES` when lexbor's id for it is a fixed one."""
    tag = node.tag
    if tag is not None and node.tag_id < _FIXED_TAG_IDS:
        tag = TAG_NAMES[node.tag_id] = sys.intern(tag)
    return tag


def _collapse_python(text: str) -> str:
    r"""Whitespace runs -> one space, ends stripped: `re.sub(r"\s+", " ", text).strip()` exactly (both
    split on `str.isspace`), 4x faster than the regex."""
    return " ".join(text.split())


_kernel = optional_kernel("zephyr.operators.extract_kernel")  # the same in C, 2.4-3.3x faster again
_collapse = _kernel.collapse_spaces if _kernel is not None else _collapse_python


def normalized_text(node) -> str:
    """All text under a node with whitespace runs collapsed to one space."""
    return _collapse(node.text(deep=True))


_text = normalized_text

_HEADINGS = {"h1": 1, "h2": 2, "h3": 3, "h4": 4, "h5": 5, "h6": 6}
_BLOCKS = frozenset(
    {
        "p",
        "div",
        "section",
        "article",
        "main",
        "header",
        "footer",
        "address",
        "center",
        "details",
        "summary",
        "dl",
        "dt",
        "dd",
        "figure",
        "figcaption",
        "caption",
        "form",
        "fieldset",
        "tr",
        "hgroup",
    }
)
_SKIP = frozenset({"-comment", "img", "picture", "source", "head", "title", "style", "script", "noscript"})
# elements whose end closes something (a block, a list, a quote); the walk schedules no exit for the rest
_CLOSING = _BLOCKS | {"ul", "ol", "li", "td", "th", "blockquote"}


class _Writer:
    """Walks a subtree once and emits blocks; Markdown and plain text share the walk."""

    def __init__(self, markdown: bool) -> None:
        self.markdown = markdown
        self.blocks: list[str] = []
        self.inline: list[str] = []
        self.prefix = ""
        self.list_stack: list[list] = []  # [kind, counter]
        self.quote_starts: list[int] = []  # index of the first block of each open <blockquote>

    def flush(self) -> None:
        if not self.inline:
            return
        text = _collapse("".join(self.inline))
        self.inline.clear()
        if text:
            self.blocks.append(self.prefix + text)
            self.prefix = ""
        # a prefix set for an empty block (e.g. an empty <li>) is dropped with it

    def walk(self, root) -> None:
        # Iterative walk (deep DOMs exceed Python's recursion limit). The stack holds nodes to enter and
        # (node, tag) exits, scheduled only for elements whose end closes something; children are pushed
        # last first, so they pop in document order.
        stack: list[Any] = [root]
        inline = self.inline
        names = TAG_NAMES
        closing = _CLOSING | {"code"} if self.markdown else _CLOSING
        while stack:
            node = stack.pop()
            if type(node) is tuple:
                self._leave(node[1])
                continue
            tag = names.get(node.tag_id) or learn_tag(node)
            if tag == "-text":
                content = node.text_content
                if content:
                    inline.append(content)
                continue
            if tag in _SKIP:
                continue
            if tag == "br":
                self._line_break()
                continue
            if tag == "hr":
                self.flush()
                continue
            if tag == "pre":
                self._pre(node)
                continue
            if tag == "table" and self._data_table(node):
                continue
            if tag in _HEADINGS:
                self.flush()
                heading = _text(node)
                if heading:
                    self.blocks.append(("#" * _HEADINGS[tag] + " " + heading) if self.markdown else heading)
                continue
            if tag in ("ul", "ol"):
                self.flush()
                self.list_stack.append([tag, 0])
            elif tag == "li":
                self.flush()
                indent = "  " * max(0, len(self.list_stack) - 1)
                if self.list_stack:
                    self.list_stack[-1][1] += 1
                    kind, count = self.list_stack[-1]
                else:
                    kind, count = "ul", 1
                if self.markdown:
                    self.prefix = indent + (f"{count}. " if kind == "ol" else "- ")
            elif tag == "blockquote":
                self.flush()
                self.quote_starts.append(len(self.blocks))
            elif tag in _BLOCKS or tag in ("td", "th"):
                self.flush()
            elif tag == "code" and self.markdown:
                inline.append("`")
            if tag in closing:
                stack.append((node, tag))
            child = node.last_child
            while child is not None:
                stack.append(child)
                child = child.prev

    def _leave(self, tag: str) -> None:
        if tag in ("ul", "ol"):
            self.flush()
            if self.list_stack:
                self.list_stack.pop()
        elif tag == "blockquote":
            self.flush()
            start = self.quote_starts.pop() if self.quote_starts else len(self.blocks)
            if self.markdown:
                # Quote every block emitted since the blockquote opened (nested quotes nest "> ").
                for i in range(start, len(self.blocks)):
                    self.blocks[i] = "\n".join("> " + line for line in self.blocks[i].split("\n"))
        elif tag == "code" and self.markdown:
            self.inline.append("`")
        elif tag in _BLOCKS or tag in ("li", "td", "th"):
            self.flush()

    def _line_break(self) -> None:
        if self.inline:
            self.inline.append("\n")
            # a line break inside a block: keep it as a separate line
            text = _collapse("".join(self.inline[:-1]))
            self.inline.clear()
            if text:
                self.blocks.append(self.prefix + text)
                self.prefix = ""

    def _pre(self, node) -> None:
        self.flush()
        raw = node.text(deep=True).strip("\n")
        if not raw.strip():
            return
        if self.markdown:
            self.blocks.append("```\n" + raw.rstrip() + "\n```")
        else:
            self.blocks.append(raw.rstrip())

    def _data_table(self, table) -> bool:
        """Render a data table; return False for layout tables (nested tables or block content)."""
        own = table.mem_id  # lexbor's css() matches the node itself too
        if any(n.mem_id != own for n in table.css("table, p, div, ul, ol, pre, h1, h2, h3, h4, h5, h6")):
            return False
        rows = []
        for tr in table.css("tr"):
            cells = [_text(cell).replace("|", "\\|" if self.markdown else "|") for cell in tr.css("th, td")]
            if any(cells):
                rows.append(cells)
        if not rows:
            return True
        self.flush()
        if not self.markdown:
            self.blocks.append("\n".join(" | ".join(c for c in row if c) for row in rows))
            return True
        width = max(len(r) for r in rows)
        rows = [r + [""] * (width - len(r)) for r in rows]
        lines = ["| " + " | ".join(rows[0]) + " |", "|" + "---|" * width]
        lines += ["| " + " | ".join(r) + " |" for r in rows[1:]]
        self.blocks.append("\n".join(lines))
        return True

    def result(self) -> str:
        self.flush()
        return "\n\n".join(self.blocks) if self.markdown else "\n".join(self.blocks)


def render_blocks(nodes: list, markdown: bool) -> str:
    """Plain text (one block per line) or Markdown (blocks separated by blank lines) of the nodes."""
    writer = _Writer(markdown)
    for node in nodes:
        writer.walk(node)
        writer.flush()
    return writer.result()
