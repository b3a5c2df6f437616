"""Tokenizer loading, the fast engines' identity with `tokenizers` (the C kernel and tiktoken, each test on
both), BOS/EOS, long-document splits."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import numpy as np
import pytest

from zephyr.tokenize import TokenizerSpec, load_tokenizer
from zephyr.tokenize.fast_bpe import VERIFICATION_SAMPLES, build_fast_encoder

MULTILINGUAL = [
    "Die Größe der Straße übertraf alle Erwartungen, sagte Jürgen am 3. Oktober 2023 um 14:05 Uhr.",
    "Le cœur a ses raisons que la raison ne connaît point.  —  Pascal (1670)\n\n\tFin.",
    "東京は日本の首都です。人口は約1400万人。北京是中国的首都，上海是最大的城市。",
    "서울특별시는 대한민국의 수도이다.   인구 9,411,264명 (2024년)",
    "Москва — столица России; население 13 104 177 чел.\r\n\r\nКонец",
    "مرحبا بالعالم ١٢٣٤ — هذا نص عربي\u00a0مع مسافة غير منقسمة",
    "नमस्ते दुनिया १२३ 😀🎉👩\u200d👩\u200d👧 🇩🇪 ✔︎ x²+y²=z²  ½ ¾",
    "    indented code:\n        for i in range(10):\n            print(i)  # 10 times\n\n\n",
    "spaces   before\tand\t\tafter   \u3000\u3000 ideographic\u2028line  sep \x0b\x0c end   ",
    "special strings <|endoftext|> and <|im_start|>user\nhi<|im_end|>  <|endoftext|>\n\n<file_sep>x",
]


def _native_built() -> bool:
    from zephyr.tokenize import native_bpe

    return native_bpe._native() is not None


@pytest.fixture(scope="module", params=["native", "tiktoken"])
def engine(request) -> str:
    if request.param == "native" and not _native_built():
        pytest.skip("zephyr.tokenize.bpe_kernel is not built (make install builds it)")
    return request.param


@pytest.fixture(scope="module")
def tok(engine):
    return load_tokenizer(TokenizerSpec(engine=engine))


@pytest.fixture(scope="module")
def tok_special(engine):
    return load_tokenizer(TokenizerSpec(parse_special=True, engine=engine))


def _reference(tokenizer, texts):
    return [e.ids for e in tokenizer.hf.encode_batch(list(texts), add_special_tokens=False)]


def test_default_tokenizer_is_smollm2_from_gguf(tok):
    info = tok.info
    assert info.name == "smollm2-135m"
    assert info.vocab_size == 49152
    assert info.eos_token == "<|endoftext|>" and info.eos_id == 0
    assert info.bos_id == 0
    assert len(info.content_hash) == 32
    assert info.engine in ("native", "tiktoken"), info.fast_path_note
    assert load_tokenizer().info.engine == ("native" if _native_built() else "tiktoken")  # auto: the first that fits
    assert Path(info.origin).is_file() and Path(info.origin).name == "tokenizer.json"  # the extraction cache
    # The GGUF says pre=smollm: digits are split one by one, as in SmolLM2's own tokenizer.json.
    ids = tok.encode("2024")
    assert len(ids) == 4 and tok.decode(ids) == "2024"


def test_fast_path_identical_on_multilingual_sample(tok, tok_special):
    texts = MULTILINGUAL + list(VERIFICATION_SAMPLES)
    for t in (tok, tok_special):
        expected = _reference(t, texts)
        got = t.encode_batch(texts)
        assert [g.tolist() for g in got] == expected
        assert [t.encode(x).tolist() for x in texts] == expected


def test_fast_path_identical_on_real_text(tok, tok_special, shared_data):
    texts = [v["articleBody"] for v in json.loads((shared_data / "aeb-dev" / "ground-truth.json").read_text()).values()]
    # Raw multilingual web pages: markup, scripts, whitespace runs, entities, every script the crawl had.
    pages = sorted((shared_data / "web-pages").glob("*.html.gz"))[::9]
    texts += [gzip.decompress(p.read_bytes()).decode("utf-8", "replace") for p in pages]
    assert len(texts) >= 70
    for t in (tok, tok_special):
        expected = _reference(t, texts)
        flat, lengths = t.encode_flat(texts)
        assert lengths.tolist() == [len(e) for e in expected]
        assert flat.tolist() == [i for e in expected for i in e]


def test_special_tokens_parsed_only_when_asked(tok, tok_special):
    text = "a<|endoftext|>b"
    plain, parsed = tok.encode(text).tolist(), tok_special.encode(text).tolist()
    assert 0 not in plain and len(plain) > 3
    assert parsed.count(0) == 1
    assert tok.decode(plain) == text == tok_special.decode(parsed)


def test_bytes_missing_from_vocab_fall_back_to_tokenizers(tok):
    # SmolLM2 has no token for byte 0x04: tokenizers drops it, letting the two '!' merge.
    text = "ok !\x04! then \x1d done"
    assert tok._fast.encode(text) is None
    assert tok.encode(text).tolist() == _reference(tok, [text])[0]
    batch = ["clean text", text, "more clean text"]
    assert [x.tolist() for x in tok.encode_batch(batch)] == _reference(tok, batch)


def test_bos_eos_added_per_document(tok):
    texts = ["first doc", "", "third  doc\n\n"]
    ref = _reference(tok, texts)
    with_eos = tok.encode_batch(texts, add_eos=True)
    assert [x.tolist() for x in with_eos] == [r + [0] for r in ref]
    both = tok.encode_batch(texts, add_bos=True, add_eos=True)
    assert [x.tolist() for x in both] == [[0] + r + [0] for r in ref]
    flat, lengths = tok.encode_flat(texts, add_bos=True, add_eos=True)
    assert lengths.tolist() == [len(r) + 2 for r in ref]
    assert flat.dtype == np.uint32


def test_long_documents_split_at_safe_spaces_with_identical_ids(shared_data):
    small = load_tokenizer(TokenizerSpec(max_chunk_chars=1000))
    bodies = [
        v["articleBody"] for v in json.loads((shared_data / "aeb-dev" / "ground-truth.json").read_text()).values()
    ]
    doc = "\n\n".join(bodies[:20]) + "  trailing   runs 12 34  \n" + " ".join(MULTILINGUAL)
    chunks = small.split_long_text(doc)
    assert len(chunks) > 20 and "".join(chunks) == doc
    assert all(len(c) <= 1000 for c in chunks[:-1])
    for c in chunks[1:]:  # every cut is at a single space between two non-space characters
        assert c[0] == " " and not c[1].isspace()
    for a in chunks[:-1]:
        assert not a[-1].isspace()
    assert small.encode(doc).tolist() == _reference(small, [doc])[0]


def test_text_without_safe_space_is_not_split():
    small = load_tokenizer(TokenizerSpec(max_chunk_chars=1000))
    text = "x" * 2500 + "\n\n" + "y" * 10
    assert small.split_long_text(text) == [text]


def _variant(tok, tmp_path: Path, name: str, edit) -> Path:
    data = json.loads(tok.hf.to_str())
    edit(data)
    path = tmp_path / name / "tokenizer.json"
    path.parent.mkdir()
    path.write_text(json.dumps(data))
    return path


def test_tokenizer_json_variants_stay_identical(tok, tmp_path):
    """Same vocabulary, other pre-tokenizers: plain GPT-2 regex, and a Llama-3-style Split regex."""
    byte_level = {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": True}
    llama3 = (
        r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*"
        r"|\s*[\r\n]+|\s+(?!\S)|\s+"
    )
    split = {
        "type": "Sequence",
        "pretokenizers": [
            {"type": "Split", "pattern": {"Regex": llama3}, "behavior": "Isolated", "invert": False},
            {**byte_level, "use_regex": False},
        ],
    }
    texts = MULTILINGUAL + list(VERIFICATION_SAMPLES)
    for name, pre in (("gpt2", byte_level), ("llama3", split)):
        path = _variant(tok, tmp_path, name, lambda d, pre=pre: d.__setitem__("pre_tokenizer", pre))
        variant = load_tokenizer(TokenizerSpec(source=str(path), engine="tiktoken"))
        assert variant.info.engine == "tiktoken"
        assert variant.info.content_hash != tok.info.content_hash
        assert variant.info.eos_token == "<|endoftext|>"  # found among the added tokens
        assert [x.tolist() for x in variant.encode_batch(texts)] == _reference(variant, texts)
    assert load_tokenizer(TokenizerSpec(source=str(tmp_path / "gpt2"))).info.split_safe
    assert not load_tokenizer(TokenizerSpec(source=str(tmp_path / "llama3"))).info.split_safe


def test_ids_out_of_merge_order_are_remapped(tok, tmp_path):
    """tiktoken ranks by id; when ids do not follow merge order, ranks follow merges and ids map back."""

    def renumber(data):
        vocab = data["model"]["vocab"]  # two merged tokens trade ids; the merge list is unchanged
        vocab["Ġthe"], vocab["Ġand"] = vocab["Ġand"], vocab["Ġthe"]

    path = _variant(tok, tmp_path, "renumbered", renumber)
    variant = load_tokenizer(TokenizerSpec(source=str(path), engine="tiktoken"))
    assert variant._fast._rank_to_id is not None
    texts = MULTILINGUAL + list(VERIFICATION_SAMPLES)
    assert [x.tolist() for x in variant.encode_batch(texts)] == _reference(variant, texts)
    assert [x.tolist() for x in variant.encode_batch(texts)] != [x.tolist() for x in tok.encode_batch(texts)]


def test_untranslatable_tokenizer_falls_back_or_raises(tok, tmp_path):
    path = _variant(tok, tmp_path, "nfkc", lambda d: d.__setitem__("normalizer", {"type": "NFKC"}))
    fallback = load_tokenizer(str(path))
    assert fallback.info.engine == "tokenizers" and "normalizer" in fallback.info.fast_path_note
    texts = ["ﬁne ① ＡＢＣ text", "plain"]
    assert [x.tolist() for x in fallback.encode_batch(texts)] == _reference(fallback, texts)
    for engine in ("native", "tiktoken"):
        with pytest.raises(ValueError, match=f"engine='{engine}' was requested .* not exact for it: normalizer"):
            load_tokenizer(TokenizerSpec(source=str(path), engine=engine))


def test_fast_encoder_rejects_a_wrong_translation(tok):
    """The load-time check catches a vocabulary whose merges tiktoken would apply differently."""
    data = json.loads(tok.hf.to_str())
    from tokenizers import Tokenizer

    reference = Tokenizer.from_str(json.dumps(data))
    reference.encode_special_tokens = True
    # Drop the merge that builds "Ġthe" but keep the token: tokenizers can no longer produce it,
    # while tiktoken still finds " the" whole in its vocabulary.
    merges = data["model"]["merges"]
    merges[:] = [m for m in merges if "".join(m.split(" ") if isinstance(m, str) else m) != "Ġthe"]
    swapped = Tokenizer.from_str(json.dumps(data))
    swapped.encode_special_tokens = True
    result = build_fast_encoder(data, swapped, parse_special=False)
    assert isinstance(result, str) and ("differ" in result or "merge" in result)
    assert not isinstance(build_fast_encoder(json.loads(tok.hf.to_str()), reference, parse_special=False), str)


def test_unknown_source_offline_says_how_to_fix(monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    with pytest.raises(FileNotFoundError, match="HF_HUB_OFFLINE"):
        load_tokenizer("SomeOrg/some-model")
    with pytest.raises(FileNotFoundError, match="does not exist"):
        load_tokenizer("/no/such/tokenizer.json")


def test_fast_path_identical_on_random_adversarial_strings(tok, tok_special):
    """Random mixes of the characters the whitespace-run rewrite and digit split must get right."""
    alphabet = [
        " ",
        " ",
        "  ",
        "\n",
        "\n\n",
        "\t",
        "\r\n",
        "\u00a0",
        "\u3000",
        "\u2028",
        "\x0b",
        "\x85",
        "\x1c",
        "1",
        "23",
        "²",
        "٣",
        "a",
        "Zé",
        "word",
        "'s",
        "'",
        "’",
        "!",
        "...",
        "-",
        "東京",
        "😀",
        "👩\u200d👧",
        "<|endoftext|>",
        "<|im_start|>",
        "<",
        "|",
        "\x04",
        "e\u0301",
    ]
    rng = np.random.default_rng(1234)
    texts = ["".join(rng.choice(alphabet, size=int(rng.integers(1, 40)))) for _ in range(400)]
    for t in (tok, tok_special):
        expected = _reference(t, texts)
        assert [x.tolist() for x in t.encode_batch(texts)] == expected


def test_native_engine_applies_listed_merges_not_concatenations(tok, tmp_path):
    """Drop the merge that builds "Ġthe" but keep the token: tokenizers can no longer produce it, tiktoken's
    rule (a concatenation in the vocabulary is merged) would; the C kernel follows the merges list, so it
    stays exact where tiktoken is refused by the load-time check."""
    if not _native_built():
        pytest.skip("zephyr.tokenize.bpe_kernel is not built")

    def drop_the(data):
        merges = data["model"]["merges"]
        merges[:] = [m for m in merges if "".join(m.split(" ") if isinstance(m, str) else m) != "Ġthe"]

    path = _variant(tok, tmp_path, "no-the-merge", drop_the)
    variant = load_tokenizer(TokenizerSpec(source=str(path), engine="native"))
    assert variant.info.engine == "native"
    texts = ["the cat and the dog", *MULTILINGUAL, *VERIFICATION_SAMPLES]
    assert [x.tolist() for x in variant.encode_batch(texts)] == _reference(variant, texts)
    assert load_tokenizer(str(path)).info.engine == "native"


def test_native_encode_many_refuses_a_wrong_encoder_or_texts():
    """The kernel's (handle, texts) arguments are checked as langid's walker is (zephyr/kernel_module.h): a
    wrong handle is a TypeError naming the function that makes an encoder, not a bare capsule error."""
    if not _native_built():
        pytest.skip("zephyr.tokenize.bpe_kernel is not built")
    from zephyr.native import optional_kernel
    from zephyr.tokenize import native_bpe

    kernel = native_bpe._native()
    with pytest.raises(TypeError, match=r"encode_many expects an encoder from new_encoder\(\), got object"):
        kernel.encode_many(object(), ["abc"])
    extract = optional_kernel("zephyr.operators.extract_kernel")
    if extract is not None:  # another kernel's capsule (a needle set) is not an encoder either
        with pytest.raises(TypeError, match=r"expects an encoder from new_encoder\(\), got PyCapsule"):
            kernel.encode_many(extract.needle_set(("abc",)), ["abc"])


def test_native_engine_on_long_pieces_and_many_documents(tok):
    """Pieces past the scan limit merge through a heap; the piece cache is shared by every later call."""
    if tok.info.engine != "native":
        pytest.skip("native engine only")
    rng = np.random.default_rng(7)
    letters = np.array(list("abcdefghijklmnopqrstuvwxyzé"))
    texts = ["".join(rng.choice(letters, size=int(n))) for n in rng.integers(40, 400, size=60)]
    texts += ["a" * 1000, "ab" * 500, " " * 300 + "x", "1" * 50 + "x" * 70]
    words = ["".join(rng.choice(letters[:6], size=int(rng.integers(1, 9)))) for _ in range(300)]
    texts += [" ".join(rng.choice(words, size=200)) for _ in range(200)]  # repeated pieces: cache hits
    expected = _reference(tok, texts)
    assert [x.tolist() for x in tok.encode_batch(texts)] == expected
    assert [x.tolist() for x in tok.encode_batch(texts[::-1])] == expected[::-1]


def test_cli_engine_choices_match_the_tokenizer():
    from zephyr.tokenize import cli, tokenizer

    assert cli.ENGINES == tokenizer.ENGINES
