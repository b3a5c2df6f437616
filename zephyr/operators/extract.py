"""HTML -> main-content text or Markdown, with a fast DOM-based boilerplate remover.

Why our own extractor: trafilatura is accurate but slow (tens of pages/s on one core); resiliparse is fast
but keeps more boilerplate. This module keeps trafilatura-level accuracy at several times its speed by
doing the heavy lifting in lexbor (selectolax's C parser: CSS selection, subtree removal, text
concatenation) and running a readability-style scorer in Python only over paragraph-like nodes.

The algorithm is general (no per-site rules); it follows the well-known readability recipe:

1. Parse; drop never-content elements (scripts, styles, forms controls, nav/aside/footer, hidden
   elements) and elements whose class/id says boilerplate (menu, comment, share, related, ...) unless
   it also says content (article, body, content, main, ...).
2. Score paragraph-like nodes (p, pre, td, blockquote, and divs holding only inline content) by length
   and commas; propagate the score to their ancestors with decay; weight by tag and class/id hints;
   scale by (1 - link density). Loose text directly inside a div that also holds blocks counts as a
   paragraph of that div. The best-scoring node is the article container; when an ancestor a few
   levels up holds clearly more prose at low link density (articles split into chunks between ads),
   that ancestor is used instead; siblings join the container when they score well or look like prose.
3. Clean the container conditionally: drop sub-blocks that are link-dense, list- or image-heavy without
   prose, or carry boilerplate hints, and paragraphs that are almost entirely link text.
4. Serialize blocks to plain text or Markdown (headings, lists, tables, code blocks, quotes kept;
   see `zephyr.operators.render`).
5. When the result is implausibly short, retry with the hint-based steps switched off (from the first
   attempt's tree with its removals undone, not a second parse).

Step 1 lives in `zephyr.operators.extract_clean`; two string loops (visible length, class-hint keywords)
in the C kernel `extract_kernel.c`, with Python fallbacks. What the speed rests on, measured on aeb-dev:
each lexbor `css()` call costs ~1.3 us before it walks (it parses the selector), each selector of a list
~10 ns a node, and `node.tag` ~90 ns (it decodes the name), so the hot loops read tag ids
(`render.TAG_NAMES`), cache each node's measures by address (`_Scores`), and ask lexbor few, short queries.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from zephyr import counters
from zephyr.operators.charset import html_for_parser
from zephyr.operators.extract_clean import class_weight as _class_weight
from zephyr.operators.extract_clean import clean as _clean
from zephyr.operators.extract_clean import kernel as _kernel
from zephyr.operators.extract_clean import remove_all as _remove_all
from zephyr.operators.extract_clean import require_selectolax as _require_selectolax
from zephyr.operators.extract_clean import undo_removals as _undo_removals
from zephyr.operators.render import TAG_NAMES, learn_tag
from zephyr.operators.render import normalized_text as _text
from zephyr.operators.render import render_blocks as _serialize

__all__ = ["ExtractConfig", "ExtractedPage", "extract_page", "html_to_text", "html_to_markdown", "ExtractText"]


@dataclass(frozen=True)
class ExtractConfig:
    """Knobs of the main-content extractor; defaults are readability's published constants.

    min_paragraph_chars: paragraphs shorter than this do not vote for a container (readability: 25).
    min_text_chars: a result shorter than this triggers a retry with less aggressive cleaning (500).
    link_density_max: blocks whose linked-text share exceeds this are navigation (0.5 with strong
        content hints, 0.2 without, as in readability's cleanConditionally).
    include_tables, include_lists: keep data tables / lists found inside the article container.
    fallback_to_body: when no container scores at all, return the whole cleaned body rather than "".
    """

    min_paragraph_chars: int = 25
    min_text_chars: int = 500
    link_density_max: float = 0.5
    include_tables: bool = True
    include_lists: bool = True
    fallback_to_body: bool = True

    def __post_init__(self) -> None:
        if self.min_paragraph_chars < 0 or self.min_text_chars < 0:
            raise ValueError(
                f"ExtractConfig: min_paragraph_chars and min_text_chars must be >= 0, got "
                f"{self.min_paragraph_chars} and {self.min_text_chars}"
            )
        if not 0.0 < self.link_density_max <= 1.0:
            raise ValueError(f"ExtractConfig.link_density_max must be in (0, 1], got {self.link_density_max}")


@dataclass(frozen=True)
class ExtractedPage:
    """What the extractor found: the title, main text (plain) and the same content as Markdown."""

    title: str
    text: str
    markdown: str


# --- step 2: scoring ---------------------------------------------------------------------------------

_BLOCK_CHILD_TAGS = frozenset(
    {
        "p",
        "div",
        "section",
        "article",
        "main",
        "ul",
        "ol",
        "dl",
        "table",
        "pre",
        "blockquote",
        "h1",
        "h2",
        "h3",
        "h4",
        "h5",
        "h6",
        "figure",
        "form",
        "hr",
        "header",
        "footer",
        "address",
        "fieldset",
    }
)


def _visible_len_python(text: str) -> int:
    """Characters that are not whitespace: a length measure immune to source indentation, and cheap."""
    return len(text) - text.count(" ") - text.count("\n") - text.count("\t") - text.count("\r")


# the same measure in one C pass: 8% of extraction time in Python
_visible_len = _kernel.visible_len if _kernel is not None else _visible_len_python


def _link_density(node, text_len: int, link_lengths: dict[int, int]) -> float:
    """Share of the node's visible characters that sit inside links (text_len from `_visible_len`).

    link_lengths: visible length of each link already measured, by lexbor node address; a link is measured
    once however many nested containers ask (valid while the tree is unchanged, so one dict per phase)."""
    return _link_density_of(node, text_len, link_lengths, node.css("a") if text_len else [])


def _linked_paragraphs(root) -> set[int]:
    """Addresses of the paragraphs under root that hold a link: one lexbor query, so the link density of the
    ~80% that hold none is known to be 0 without a `css("a")` each (~1.3 us a call, mostly parsing the
    selector)."""
    return {para.mem_id for para in root.css("p:has(a)")}


def _link_density_of(node, text_len: int, link_lengths: dict[int, int], links: list) -> float:
    """`_link_density` with the node's links (`node.css("a")`) already selected."""
    if text_len == 0:
        return 0.0
    link_len = 0
    for a in links:
        key = a.mem_id
        length = link_lengths.get(key)
        if length is None:
            length = link_lengths[key] = _visible_len(a.text(deep=True))
        link_len += length
    return min(1.0, link_len / text_len)


def _initial_score(node, use_weights: bool) -> float:
    tag = TAG_NAMES.get(node.tag_id) or learn_tag(node)
    score = 0.0
    if tag == "div":
        score = 5
    elif tag in ("pre", "td", "blockquote"):
        score = 3
    elif tag in ("address", "ol", "ul", "dl", "dd", "dt", "li", "form"):
        score = -3
    elif tag in ("h1", "h2", "h3", "h4", "h5", "h6", "th"):
        score = -5
    if use_weights:
        score += _class_weight(node)
    return score


def _has_block_child(node) -> bool:
    child = node.first_child
    while child is not None:
        if (TAG_NAMES.get(child.tag_id) or learn_tag(child)) in _BLOCK_CHILD_TAGS:
            return True
        child = child.next
    return False


def _inline_text(node) -> str:
    """Text of a node's own phrasing content: direct text nodes and inline children, not block children."""
    parts = []
    child = node.first_child
    while child is not None:
        tag = TAG_NAMES.get(child.tag_id) or learn_tag(child)
        if tag == "-text":
            parts.append(child.text_content or "")
        elif tag not in _BLOCK_CHILD_TAGS and tag != "-comment":
            parts.append(child.text(deep=True))
        child = child.next
    return " ".join(parts)


def _paragraph_nodes(body) -> list[tuple[Any, str, bool]]:
    """(voter, text, loose) for every paragraph-like piece of the page, non-div paragraphs first, then
    divs, each in document order; the first ancestor to credit is the voter itself when `loose`, else
    its parent.

    Like readability, a div with only inline content counts as a paragraph, and the loose text of a
    div that also holds blocks counts as a paragraph of its own inside that div (articles written as
    bare text + <br> inside a layout div are common on older sites).
    """
    out = []
    divs = []
    for node in body.css("p, pre, td, blockquote, section, h2, h3, h4, h5, h6, div"):  # one walk for both
        if (TAG_NAMES.get(node.tag_id) or learn_tag(node)) == "div":
            divs.append(node)
        else:
            out.append((node, node.text(deep=True), False))
    for div in divs:
        if not _has_block_child(div):
            out.append((div, div.text(deep=True), False))
        else:
            loose = _inline_text(div)
            if len(loose) >= 25:
                out.append((div, loose, True))
    return out


class _Scores:
    """Candidate containers: raw readability score, and the final score (raw x (1 - link density))
    computed lazily, because link density is the costly part and only a handful of candidates (the
    top few, their parents and siblings) are ever looked at."""

    def __init__(self, body) -> None:
        self.body = body
        self.entries: dict[int, list] = {}  # mem_id -> [node, raw score, final score or None]
        # Measures that the steps after scoring ask again for the same nodes (nested containers, a
        # paragraph seen from each ancestor), by node address; the tree is not changed until cleaning.
        self.link_lengths: dict[int, int] = {}
        self.link_densities: dict[int, float] = {}
        self.prose: dict[int, int] = {}
        self._linked_paragraphs: set[int] | None = None

    def linked_paragraphs(self) -> set[int]:
        """Addresses of the paragraphs that hold a link (see `_linked_paragraphs`)."""
        if self._linked_paragraphs is None:
            self._linked_paragraphs = _linked_paragraphs(self.body)
        return self._linked_paragraphs

    def __bool__(self) -> bool:
        return bool(self.entries)

    def final(self, node, default: float | None = None) -> float | None:
        entry = self.entries.get(node.mem_id)
        if entry is None:
            return default
        if entry[2] is None:
            entry[2] = entry[1] * (1.0 - self.link_density(entry[0]))
        return entry[2]

    def link_density(self, node) -> float:
        key = node.mem_id
        density = self.link_densities.get(key)
        if density is None:
            length = _visible_len(node.text(deep=True))
            density = self.link_densities[key] = _link_density(node, length, self.link_lengths)
        return density

    def ranked(self, k: int) -> list[tuple[Any, float]]:
        """The k best (node, final score), best first. final <= max(raw, 0), so once k finals beat
        every remaining raw score the rest cannot enter."""
        best: list[tuple[float, int, Any]] = []
        for order, entry in enumerate(sorted(self.entries.values(), key=lambda e: e[1], reverse=True)):
            if len(best) >= k and max(entry[1], 0.0) <= best[-1][0]:
                break
            best.append((self.final(entry[0]), -order, entry[0]))
            best.sort(key=lambda b: (b[0], b[1]), reverse=True)
            del best[k:]
        return [(node, score) for score, _, node in best]


def _find_candidates(body, config: ExtractConfig, use_weights: bool) -> _Scores:
    """Readability's scoring: every container that got votes from the paragraphs below it."""
    scores = _Scores(body)
    entries = scores.entries
    # The up-to-5 ancestors credited, per first ancestor: paragraphs share parents, so each chain is
    # walked once (lexbor hands out a new Python object per .parent).
    chains: dict[int, list[tuple[int, Any]]] = {}
    for para, text, loose in _paragraph_nodes(body):
        length = _visible_len(text)
        if length < config.min_paragraph_chars:
            continue
        content_score = 1.0 + text.count(",") + text.count("，") + min(length // 100, 3)
        first = para if loose else para.parent
        if first is None:
            continue
        chain = chains.get(first.mem_id)
        if chain is None:
            chain = chains[first.mem_id] = _credited_ancestors(first)
        for level, (key, ancestor) in enumerate(chain):
            entry = entries.get(key)
            if entry is None:
                entry = entries[key] = [ancestor, _initial_score(ancestor, use_weights), None]
            divider = 1 if level == 0 else (2 if level == 1 else level * 3)
            entry[1] += content_score / divider
    return scores


def _credited_ancestors(node) -> list[tuple[int, Any]]:
    """(address, node) of `node` and its ancestors, 5 at most, up to (not including) the root element."""
    chain: list[tuple[int, Any]] = []
    while node is not None and len(chain) < 5:
        tag = TAG_NAMES.get(node.tag_id) or learn_tag(node)
        if tag in ("html", "-document", "#document") or tag is None:
            break
        chain.append((node.mem_id, node))
        node = node.parent
    return chain


def _is_ancestor(ancestor, node) -> bool:
    key = ancestor.mem_id
    cur = node.parent
    while cur is not None:
        if cur.mem_id == key:
            return True
        cur = cur.parent
    return False


def _pick_top(body, scores: _Scores):
    if not scores:
        return None, 0.0
    ranked = scores.ranked(5)
    top, top_score = ranked[0]
    if top.tag == "body":
        return top, top_score
    # When several strong candidates share an ancestor, the article is that ancestor (readability).
    alternatives = [node for node, score in ranked[1:5] if top_score > 0 and score / top_score >= 0.75]
    if len(alternatives) >= 3:
        parent = top.parent
        while parent is not None and parent.tag not in ("body", "html"):
            if sum(1 for alt in alternatives if _is_ancestor(parent, alt)) >= 3:
                top = parent
                break
            parent = parent.parent
        top_score = scores.final(top, top_score)
    # Climb while the parent scores comparably: the container may be split into scored halves.
    parent = top.parent
    last_score = top_score
    threshold = last_score / 3
    while parent is not None and parent.tag not in ("body", "html"):
        parent_score = scores.final(parent)
        if parent_score is None:
            parent = parent.parent
            continue
        if parent_score < threshold:
            break
        if parent_score > last_score:
            top, top_score = parent, parent_score
            break
        last_score = parent_score
        parent = parent.parent
    # An only child carries no information of its own: use its parent.
    while top.parent is not None and top.parent.tag not in ("body", "html") and _only_element_child(top):
        top = top.parent
        top_score = scores.final(top, top_score)
    return top, top_score


_WIDEN_GAIN = 1.5  # an ancestor must hold 50% more prose than the winner to replace it
_WIDEN_LINK_DENSITY = 0.3
_WIDEN_LEVELS = 3


def _prose_mass(node, scores: _Scores) -> int:
    """Visible characters in the node's prose paragraphs (>= 25 chars, mostly not links)."""
    mass = 0
    measured = scores.prose
    linked = scores.linked_paragraphs()
    for para in node.css("p"):
        key = para.mem_id
        prose = measured.get(key)
        if prose is None:
            length = _visible_len(para.text(deep=True))
            prose = (
                length
                if length >= 25 and (key not in linked or _link_density(para, length, scores.link_lengths) < 0.5)
                else 0
            )
            measured[key] = prose
        mass += prose
    return mass


def _widen_to_split_article(top, top_score: float, scores: _Scores):
    """Articles split into chunks (body, ad, body, ad ...) make one chunk win; readability's sibling
    pass only sees the winner's siblings, not cousins. Climb a few levels when an ancestor holds
    clearly more prose (gain) while staying prose, not navigation (link density)."""
    best, best_mass = top, _prose_mass(top, scores)
    if best_mass == 0:
        return top, top_score
    ancestor = top.parent
    for _ in range(_WIDEN_LEVELS):
        if ancestor is None or ancestor.tag in ("body", "html"):
            break
        mass = _prose_mass(ancestor, scores)
        if mass >= best_mass * _WIDEN_GAIN and scores.link_density(ancestor) <= _WIDEN_LINK_DENSITY:
            best, best_mass = ancestor, mass
        ancestor = ancestor.parent
    if best is top:
        return top, top_score
    return best, scores.final(best, top_score)


def _only_element_child(node) -> bool:
    parent = node.parent
    child = parent.first_child
    count = 0
    while child is not None:
        tag = child.tag
        if tag == "-text":
            if (child.text_content or "").strip():
                return False
        elif tag != "-comment":
            count += 1
            if count > 1:
                return False
        child = child.next
    return True


def _select_content(top, top_score: float, scores: _Scores, use_weights: bool) -> list:
    """The top container plus the siblings that look like part of the article (readability)."""
    parent = top.parent
    if parent is None or top.tag == "body":
        return [top]
    threshold = max(10.0, top_score * 0.2)
    top_class = top.attributes.get("class") or ""
    selected = []
    child = parent.first_child
    top_key = top.mem_id
    while child is not None:
        if child.tag in ("-text", "-comment"):
            child = child.next
            continue
        if child.mem_id == top_key:
            selected.append(child)
        else:
            bonus = top_score * 0.2 if top_class and (child.attributes.get("class") or "") == top_class else 0.0
            child_score = scores.final(child)
            if child_score is not None and child_score + bonus >= threshold:
                selected.append(child)
            elif child.tag == "p":
                text = _text(child)
                density = _link_density(child, _visible_len(text), scores.link_lengths)
                if (
                    len(text) > 80
                    and density < 0.25
                    or 0 < len(text) <= 80
                    and density == 0
                    and re.search(r"\.( |$)", text)
                ):
                    selected.append(child)
        child = child.next
    return selected


# --- step 3: conditional cleaning --------------------------------------------------------------------


def _clean_conditionally(root, config: ExtractConfig, use_weights: bool, undo: list | None = None) -> int:
    """Remove the link-, list- and image-heavy blocks and link-only paragraphs under root; return how many."""
    doomed = []
    own = root.mem_id
    link_lengths: dict[int, int] = {}  # every verdict is taken before any removal
    for node in root.css("div, section, ul, ol, table, form, dl, figure"):
        if node.mem_id == own:
            continue  # the container itself was chosen by scoring; lexbor's css() includes it
        tag = node.tag
        if tag == "table" and not config.include_tables:
            doomed.append(node)
            continue
        if tag in ("ul", "ol") and not config.include_lists:
            doomed.append(node)
            continue
        # One walk of the subtree for all the counts below (it was five queries, one per tag).
        inner = node.css("p, img, li, a, pre, code")
        tags = [TAG_NAMES.get(n.tag_id) or learn_tag(n) for n in inner]
        if ("pre" in tags or "code" in tags) and tag not in ("ul", "ol"):
            continue  # code samples are content even when they are short and link-free
        weight = _class_weight(node) if use_weights else 0
        if weight < 0:
            doomed.append(node)
            continue
        text = node.text(deep=True)
        if text.count(",") >= 10:
            continue
        if tag == "figure":
            doomed.append(node)  # captions and credits: not article prose
            continue
        text_len = _visible_len(text)
        paragraphs = tags.count("p")
        images = tags.count("img")
        list_items = tags.count("li") - 100
        density = _link_density_of(
            node, text_len, link_lengths, [n for n, t in zip(inner, tags, strict=True) if t == "a"]
        )
        is_list = tag in ("ul", "ol")
        # (readability also drops blocks with more form inputs than paragraphs / 3: step 1 removed inputs)
        if (
            images > 1
            and paragraphs / images < 0.5
            and text_len < 200
            or not is_list
            and list_items > paragraphs
            or not is_list
            and tag != "table"
            and text_len < 25
            and (images == 0 or images > 2)
            or weight < 25
            and density > 0.2 + (0.15 if is_list else 0.0)
            and text_len < 1000
            or weight >= 25
            and density > config.link_density_max
        ):
            doomed.append(node)
    _remove_all(doomed, undo)
    # A paragraph that is almost all link text is a "read more" / related-story line, not prose.
    link_lengths = {}  # the removals may have emptied a link (a <div> inside an <a>)
    link_lines = [
        para
        for para in root.css("p:has(a)")
        if para.mem_id != own
        and (length := _visible_len(para.text(deep=True)))
        and _link_density(para, length, link_lengths) > _PARAGRAPH_LINK_DENSITY_MAX
    ]
    _remove_all(link_lines, undo)
    return len(doomed) + len(link_lines)


_PARAGRAPH_LINK_DENSITY_MAX = 0.8


# --- entry points -------------------------------------------------------------------------------------


def _title(tree) -> str:
    node = tree.css_first("meta[property='og:title']")
    if node is not None and (node.attributes.get("content") or "").strip():
        return " ".join(node.attributes["content"].split())
    node = tree.css_first("title")
    if node is not None:
        return _text(node)
    node = tree.css_first("h1")
    return _text(node) if node is not None else ""


def _drop_title_heading(nodes: list, title: str, undo: list | None = None) -> None:
    if not title:
        return
    norm_title = re.sub(r"\W+", " ", title.lower()).strip()
    doomed = []
    for node in nodes:
        for heading in node.css("h1, h2"):
            text = re.sub(r"\W+", " ", _text(heading).lower()).strip()
            if text and (text == norm_title or (len(text) > 15 and text in norm_title)):
                doomed.append(heading)
    _remove_all(doomed, undo)


def _extract_once(
    tree, title: str, config: ExtractConfig, use_weights: bool, clean_cond: bool, undo: list | None = None
) -> tuple[list, int]:
    """The content nodes, and how many elements conditional cleaning removed from them (removals logged in
    `undo` when given)."""
    body = tree.body
    if body is None:
        return [], 0
    scores = _find_candidates(body, config, use_weights)
    top, top_score = _pick_top(body, scores)
    if top is None:
        return ([body] if config.fallback_to_body else []), 0
    top, top_score = _widen_to_split_article(top, top_score, scores)
    nodes = _select_content(top, top_score, scores, use_weights)
    removed = 0
    if clean_cond:
        for node in nodes:
            removed += _clean_conditionally(node, config, use_weights, undo)
    _drop_title_heading(nodes, title, undo)
    return nodes, removed


# readability's retry ladder: each step trusts class/id hints less. (strip_unlikely, use_weights, clean_cond);
# only the first strips unlikely elements (extract_page relies on it).
_ATTEMPTS = ((True, True, True), (False, True, True), (False, False, True), (False, False, False))


def extract_page(
    html: str | bytes,
    config: ExtractConfig = ExtractConfig(),
    *,
    content_type: str | None = None,
    markdown: bool = True,
) -> ExtractedPage:
    """Extract the main content of one page as plain text and (unless `markdown=False`) Markdown.

    `html` may be bytes (the charset is detected, see `zephyr.operators.charset`) or str.
    Never raises on bad markup: a page with no recognizable content yields empty strings.

    >>> page = "<html><body><nav>Home</nav><article><p>" + "Real prose, here. " * 20 + "</p></article></body></html>"
    >>> extract_page(page).text[:10]
    'Real prose'
    """
    parser_cls = _require_selectolax()
    source = html_for_parser(html, content_type)
    tree = parser_cls(source)
    title = _title(tree)
    # Cleaning mutates the DOM. The first attempt (enough for ~85% of pages) works on the parsed tree and
    # logs every removal after the never-content ones; the retries start from that tree with the log undone
    # (it is then what step 1 leaves without the class/id hints: no second parse and clean, which were a
    # third of the retries' time), all but the last on a copy of it.
    undo: list = []
    if tree.body is not None:
        _clean(tree.body, strip_unlikely=_ATTEMPTS[0][0], undo=undo)
    best: tuple[list, str, str | None] | None = None  # nodes, text, Markdown when rendered early
    trees = [tree]  # every attempt's tree stays referenced while its nodes are used
    for k, (_strip_unlikely, use_weights, clean_cond) in enumerate(_ATTEMPTS):
        if k == 1:
            if markdown and best is not None and best[2] is None:
                best = (best[0], best[1], _serialize(best[0], markdown=True))  # before its tree changes back
            _undo_removals(undo)
        if k > 0:
            tree = trees[0] if k == len(_ATTEMPTS) - 1 else _copy(trees[0], source, parser_cls)
            trees.append(tree)
        nodes, removed = _extract_once(tree, title, config, use_weights, clean_cond, undo if k == 0 else None)
        text = _serialize(nodes, markdown=False)
        if best is None or len(text) > len(best[1]):
            best = (nodes, text, None)
        if len(text) >= config.min_text_chars:
            break
        if k == len(_ATTEMPTS) - 2 and not removed:
            break  # the last attempt only skips conditional cleaning, which removed nothing here: same text
    assert best is not None
    md = (best[2] if best[2] is not None else _serialize(best[0], markdown=True)) if markdown else ""
    return ExtractedPage(title=title, text=best[1], markdown=md)


def _copy(tree: Any, source: str | bytes, parser_cls: Any) -> Any:
    """A copy of a cleaned `tree` to clean further: a C-level clone (~5x cheaper than parsing again), or a new
    parse of the page, cleaned likewise, when lexbor cannot clone it. It cannot for a malformed DOCTYPE
    (`<!DOCTYPE html PUBLIC>`, a PUBLIC or SYSTEM keyword without its quoted identifier: seen in the wild,
    after an edit tool's mangling), and raised "Can't create a new document", failing the whole extraction
    step."""
    try:
        return tree.clone()
    except Exception as error:  # noqa: BLE001 - selectolax raises its own SelectolaxError
        if "create a new document" not in str(error):
            raise
        copy = parser_cls(source)
        if copy.body is not None:
            _clean(copy.body, strip_unlikely=False)
        return copy


def html_to_text(html: str | bytes, config: ExtractConfig = ExtractConfig()) -> str:
    """Main-content plain text of a page (one block per line)."""
    return extract_page(html, config, markdown=False).text


def html_to_markdown(html: str | bytes, config: ExtractConfig = ExtractConfig()) -> str:
    """Main content of a page as Markdown: headings, lists, tables and code blocks kept."""
    return extract_page(html, config).markdown


@dataclass(frozen=True)
class ExtractText:
    """Document operator: `html` field -> `text` (and optionally `markdown`), for `Dataset.map`.

    Adds `title` to metadata. Pages whose extraction is empty keep `text=""` and get
    `filter_reason="extract_empty"` so a later filter drops them with a stable reason; counters:
    `extract/documents`, `extract/empty`.
    """

    config: ExtractConfig = ExtractConfig()
    html_field: str = "html"
    markdown: bool = False
    keep_html: bool = False

    def __call__(self, doc: dict) -> dict:
        raw = doc.get(self.html_field)
        if raw is None:
            raise KeyError(
                f"ExtractText expected an HTML field {self.html_field!r} in document "
                f"{doc.get('id')!r}, got fields {sorted(doc)}; set ExtractText(html_field=...) to the field "
                "that holds the page"
            )
        if not isinstance(raw, (str, bytes)):
            raise TypeError(
                f"ExtractText expected the {self.html_field!r} field of document {doc.get('id')!r} to be str or "
                f"bytes (the page), got {type(raw).__name__}"
            )
        content_type = (doc.get("metadata") or {}).get("content_type")
        page = extract_page(raw, self.config, content_type=content_type, markdown=self.markdown)
        out = {k: v for k, v in doc.items() if k != self.html_field or self.keep_html}
        out["text"] = page.markdown if self.markdown else page.text
        metadata = dict(out.get("metadata") or {})
        metadata["title"] = page.title
        out["metadata"] = metadata
        counters.increment("extract/documents")
        if not out["text"].strip():
            counters.increment("extract/empty")
            if not out.get("filter_reason"):
                out["filter_reason"] = "extract_empty"
        return out
