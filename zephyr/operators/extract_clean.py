"""Step 1 of main-content extraction (`zephyr.operators.extract`): removing what is never content and what
class/id hints call boilerplate, and the hint tests the scorer reuses (readability's class weights).

Kept apart from the scorer because it is its own concern, with its own speed story: lexbor evaluates a
selector list node by node (~10 ns a selector a node), so step 1 is two queries classified in Python on
lexbor tag ids and attribute dicts, and the class/id keyword regexes go through the C kernel's needle
sets first (`zephyr/operators/extract_kernel.c`). Removals can be logged and undone, so the extractor's
retries start from the first attempt's tree instead of a second parse.
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass
from typing import Any

from zephyr.native import optional_kernel

# string loops in C (zephyr/operators/extract_kernel.c); the Python paths are the reference and fallback
kernel = optional_kernel("zephyr.operators.extract_kernel")


__all__ = ["clean", "remove_all", "undo_removals", "class_weight", "kernel", "require_selectolax"]


def require_selectolax() -> Any:
    """selectolax's lexbor parser class, or an ImportError that says how to install it."""
    try:
        from selectolax.lexbor import LexborHTMLParser
    except ImportError as exc:  # pragma: no cover - selectolax is in the operators extra
        raise ImportError(
            "zephyr.operators.extract needs selectolax>=1.0 (lexbor backend); "
            "install it with: pip install 'zephyr[operators]'  (or: pip install 'selectolax>=1.0')"
        ) from exc
    return LexborHTMLParser


# Never content: these elements, and elements carrying one of the attributes below. Step 1 is two lexbor
# queries, every element (its tag id checked in Python), then every element with a telling attribute
# (classified in Python). lexbor tries each selector of a list on each node, ~10 ns a try: this list as
# one selector cost 0.19 ms a page on aeb-dev, `*` and a set lookup of `node.tag` 0.12 ms, of
# `node.tag_id` 0.05 ms (`tag` looks the name up in a dict); the 15 attribute-value selectors
# (`[role=...]`, `[class*=...]`) it used to hold cost another 0.2 ms. The tags go first so that the
# attributes inside them (navigation and footers are full of classes) are never read.
_NEVER_TAGS = frozenset(
    {
        *("script", "style", "noscript", "template", "svg", "math", "canvas", "iframe", "object", "embed"),
        *("video", "audio", "button", "select", "input", "textarea", "option", "label", "nav", "aside"),
        *("footer", "header", "dialog", "menu", "link", "meta"),
    }
)


@functools.lru_cache(maxsize=1)
def _never_tag_ids() -> frozenset[int]:
    """lexbor's ids of `_NEVER_TAGS`: fixed for the tags of the HTML standard, read off a parsed probe."""
    probe = require_selectolax()("<body>" + "".join(f"<{tag}></{tag}>" for tag in sorted(_NEVER_TAGS)))
    ids = frozenset(node.tag_id for node in probe.root.css("*") if node.tag in _NEVER_TAGS)
    if len(ids) != len(_NEVER_TAGS):  # pragma: no cover - a lexbor that numbers tags some other way
        raise RuntimeError(f"lexbor gave {len(ids)} ids for the {len(_NEVER_TAGS)} never-content tags")
    return ids


_NEVER_ROLES = frozenset({"navigation", "banner", "contentinfo", "complementary", "dialog", "alert", "menu", "menubar"})
_ATTRIBUTE_QUERY = "[style], [hidden], [aria-hidden], [role], [class], [id]"


def _grouped(alternation: str) -> re.Pattern[str]:
    """`re.compile(alternation)` for a flat `a|b|c` of keywords, its branches grouped by first character
    (`ad(?:vert|i2html)|b(?:anner|yline)`): the same strings match, but sre tries every branch of an
    alternation at every position, and grouped it tries one group, halving the time a class string takes
    (1.8 -> 0.9 us for `_UNLIKELY`). Branches that start with an anchor, a space or a quantified character
    stay as they are."""
    groups: dict[str, list[str]] = {}
    kept = []
    for branch in alternation.split("|"):
        if (branch[0].isalnum() or branch[0] == "-") and branch[1:2] not in ("?", "*", "+", "{"):
            groups.setdefault(branch[0], []).append(branch[1:])
        else:
            kept.append(branch)
    for first, tails in groups.items():
        kept.append(re.escape(first) + (tails[0] if len(tails) == 1 else "(?:" + "|".join(tails) + ")"))
    return re.compile("|".join(kept))


_BRANCH_TOKEN = re.compile(r"(\\b)|(\^|\$)|\\?([a-z0-9 -])(\?)?|(.)")


def _branch_needles(branch: str) -> tuple[list[str], bool]:
    """Needles for the kernel's `contains_any` that a string holds whenever the keyword branch matches it, and
    whether they are exact (the string holds one exactly when the branch matches).

    A branch of literal characters, optional characters (`s?`) and word boundaries (`\\b`) at its ends is
    exact: one needle per spelling (`tags?\\b` -> `tag\\b`, `tags\\b`). Otherwise (`^`, `$`, a boundary
    inside) the needle is the longest run every match contains, and the regex decides. Only that syntax is
    allowed, so a branch that needs more fails here, at import, not by missing matches."""
    items = []  # (kind, character, optional): kind "c" character, "b" boundary, "a" anchor
    for token in _BRANCH_TOKEN.finditer(branch):
        boundary, anchor, char, optional, other = token.groups()
        if other is not None:
            raise ValueError(f"keyword branch {branch!r}: {other!r} is beyond the syntax _Keywords understands")
        items.append(("b", "", False) if boundary else ("a", "", False) if anchor else ("c", char, bool(optional)))
    inner = items[1:-1] if len(items) > 2 else []
    if all(kind == "c" for kind, _, _ in inner) and all(kind != "a" for kind, _, _ in items):
        spellings = [""]
        for kind, char, optional in items:
            if kind == "b":
                spellings = [spelling + "\\b" for spelling in spellings]
            else:
                spellings = [spelling + char for spelling in spellings] + (spellings if optional else [])
        if all(spelling.replace("\\b", "") for spelling in spellings):
            return spellings, True
    runs, run = [], ""
    for kind, char, optional in items:
        if kind != "c" or optional:
            runs.append(run)
            run = ""
        else:
            run += char
    longest = max([*runs, run], key=len)
    if not longest:
        raise ValueError(f"keyword branch {branch!r} has no character every match must contain")
    return [longest], False


@dataclass(frozen=True)
class _Keywords:
    """A flat alternation of class/id keywords, as a test `keywords(text) -> bool` (does any branch match).

    With the C kernel, `contains_any` looks for the branches' needles first (~0.1 us a class string): when
    they are exact that is the answer, else only strings holding one run the regex (~1 us in sre, ~26 ns a
    character). Class verdicts are cached, but a crawl meets ~75 new class strings a page."""

    alternation: str
    pattern: re.Pattern[str]
    needles: Any  # the kernel's needle set (see `_branch_needles`); None without the kernel
    exact: bool  # the needles alone decide

    def __call__(self, text: str) -> bool:
        if self.needles is None:
            return self.pattern.search(text) is not None
        if not kernel.contains_any(text, self.needles):
            return False
        return self.exact or self.pattern.search(text) is not None


def _keywords(alternation: str) -> _Keywords:
    needles, exact = [], True
    for branch in alternation.split("|"):
        branch_needles, branch_exact = _branch_needles(branch)
        needles += branch_needles
        exact = exact and branch_exact
    return _Keywords(
        alternation=alternation,
        pattern=_grouped(alternation),
        needles=kernel.needle_set(tuple(dict.fromkeys(needles))) if kernel is not None else None,
        exact=exact,
    )


# text only screen readers get ("Skip to content", "Opens in a new window")
_SCREEN_READER_CLASSES = _keywords("screen-reader|sr-only|visually-hidden|visuallyhidden")
_UNLIKELY_WORDS = (
    r"-ad-|\bads?\b|advert|ai2html|banner|breadcrumb|byline|combx|comment|community|cookie|consent|"
    r"cover-wrap|disqus|extra|footer|gdpr|header|legends|menu|modal|newsletter|outbrain|taboola|"
    r"pagination|pager|popup|promo|related|remark|replies|rss|share|sharing|shoutbox|sidebar|"
    r"skyscraper|social|sponsor|subscri|supplemental|tags?\b|teaser|toolbar|tooltip|widget|"
    r"yom-remote|signup|sign-up|recommend|trending|most-?popular|author-?bio|caption|credit"
)
_UNLIKELY = _keywords(_UNLIKELY_WORDS)
_MAYBE_CANDIDATE_WORDS = r"and|article|body|column|content|main|shadow|story|entry|post|text"
_MAYBE_CANDIDATE = _keywords(_MAYBE_CANDIDATE_WORDS)
_POSITIVE_WORDS = r"article|body|content|entry|hentry|h-entry|main|page|pagination|post|text|blog|story|prose"
_POSITIVE = _keywords(_POSITIVE_WORDS)
_NEGATIVE_WORDS = (
    r"-ad-|hidden|^hid$| hid$| hid |^hid |banner|combx|comment|com-|contact|foot|footer|footnote|gdpr|"
    r"masthead|media|meta|outbrain|promo|related|scroll|share|shoutbox|sidebar|skyscraper|sponsor|"
    r"shopping|tags|tool|widget|caption|credit|newsletter|subscribe|social|byline|author"
)
_NEGATIVE = _keywords(_NEGATIVE_WORDS)
_HIDDEN_STYLE = re.compile(r"display\s*:\s*none|visibility\s*:\s*hidden", re.I)
_PROTECTED_TAGS = frozenset({"html", "body", "article", "main", "a", "table", "tbody", "tr", "td", "th", "code", "pre"})


def _is_hidden_style(style: str) -> bool:
    # Cheap substring test first: almost no inline style hides anything.
    return ("none" in style or "hidden" in style) and _HIDDEN_STYLE.search(style) is not None


@functools.lru_cache(maxsize=65536)
def _hint_weight(value: str) -> int:
    value = value.lower()
    weight = 0
    if _NEGATIVE(value):
        weight -= 25
    if _POSITIVE(value):
        weight += 25
    return weight


def class_weight(node) -> int:
    """Readability's class/id weight of a node: -25 for each of its class and id that says boilerplate, +25 for each
    that says content (a value can say both); the scorer adds it to a candidate's score."""
    attrs = node.attributes
    weight = 0
    for value in (attrs.get("class"), attrs.get("id")):
        if value:
            weight += _hint_weight(value)
    return weight


def remove_all(nodes: list, undo: list | None = None) -> None:
    """Unlink the nodes from the tree, each with its subtree attached (recursive=False): lexbor frees nothing
    either way (the document owns the memory), and the recursive form unlinks every node of the subtree one
    by one, a third of step 1's time on aeb-dev. Reverse document order: a descendant goes before its
    ancestor, so every node is still in the document when it is unlinked.

    undo: when given, (node, parent, next sibling) of each removal is appended, for `undo_removals`."""
    if undo is None:
        for node in reversed(nodes):
            node.decompose(recursive=False)
        return
    for node in reversed(nodes):
        undo.append((node, node.parent, node.next))
        node.decompose(recursive=False)


def undo_removals(undo: list) -> None:
    """Put the nodes `remove_all` logged back where they were, last removal first, so that each goes back
    into the very tree it left (its parent and next sibling are there again when its turn comes)."""
    for node, parent, following in reversed(undo):
        if following is not None:
            following.insert_before(node, move=True)
        elif parent is not None:
            parent.insert_child(node, move=True)
    undo.clear()


_SCREEN_READER = 1  # a class only screen readers see: never content
_SKIP_LINK = 2  # "skip-link" in some letter case among the classes: `.skip-link` may match
_UNLIKELY_HINT = 4  # class/id says boilerplate


@functools.lru_cache(maxsize=65536)
def _hint_flags(cls: str | None, ident: str | None) -> int:
    """What an element's class and id say (`_SCREEN_READER` | `_SKIP_LINK` | `_UNLIKELY_HINT`), cached:
    class strings repeat heavily within and across pages. The hint patterns are lower-case and matched on
    lowered text (re.IGNORECASE is ~5x slower); the screen-reader classes case-sensitively, as CSS's
    `[class*=...]` matches them."""
    flags = 0
    if cls:
        if _SCREEN_READER_CLASSES(cls):
            flags |= _SCREEN_READER
        elif "skip-link" in cls.lower():
            flags |= _SKIP_LINK
    if cls or ident:
        hint = f"{cls or ''} {ident or ''}".lower()
        if _UNLIKELY(hint) and not _MAYBE_CANDIDATE(hint):
            flags |= _UNLIKELY_HINT
    return flags


def clean(body, strip_unlikely: bool, undo: list | None = None) -> None:
    """Remove never-content elements (`_NEVER_TAGS`, hidden, screen-reader-only, navigation roles),
    elements hidden by inline style and, with `strip_unlikely`, elements whose class/id says boilerplate
    (those last removals logged in `undo` when given: the retries want the tree without them).

    Each verdict rests on the element's own tag and attributes only, so removing all doomed elements at once
    leaves the same tree as removing each kind in turn."""
    never = _never_tag_ids()
    remove_all([node for node in body.css("*") if node.tag_id in never])
    doomed = []
    unlikely = []
    skip_links = []
    for node in body.css(_ATTRIBUTE_QUERY):
        attrs = node.attributes
        style = attrs.get("style")
        flags = _hint_flags(attrs.get("class"), attrs.get("id"))
        if (
            flags & _SCREEN_READER
            or "hidden" in attrs
            or attrs.get("aria-hidden") == "true"
            or attrs.get("role") in _NEVER_ROLES
            or style is not None
            and _is_hidden_style(style)
        ):
            doomed.append(node)
        elif strip_unlikely and flags & _UNLIKELY_HINT and node.tag not in _PROTECTED_TAGS:
            unlikely.append(node)
        elif flags & _SKIP_LINK:
            skip_links.append(node)
            doomed.append(node)
    if skip_links:
        # `.skip-link` matches case-insensitively in quirks mode only: let lexbor, which knows the mode, decide.
        matched = {node.mem_id for node in body.css(".skip-link")}
        unmatched = {node.mem_id for node in skip_links if node.mem_id not in matched}
        doomed = [node for node in doomed if node.mem_id not in unmatched]
    remove_all(doomed)
    remove_all(unlikely, undo)
