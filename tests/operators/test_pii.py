"""PII redaction: what must be caught, and the look-alikes that must be left alone."""

from __future__ import annotations

import gzip
import random
import re

import pytest

from zephyr import counters
from zephyr.operators.extract import html_to_text
from zephyr.operators.pii import EMAIL_RE, IPV4_RE, IPV6_RE, PHONE_RE, PiiRedactor, redact_pii


@pytest.mark.parametrize(
    "text, expected",
    [
        ("Write to john.doe@example.com or jane+news@mail.co.uk.", "Write to <EMAIL> or <EMAIL>."),
        ("Server 192.168.1.10 answered; 8.8.8.8 too.", "Server <IP> answered; <IP> too."),
        ("v6: 2001:db8::ff00:42:8329 and fe80:0:0:0:202:b3ff:fe1e:8329.", "v6: <IP> and <IP>."),
        ("Call (555) 123-4567 or 555-123-4567.", "Call <PHONE> or <PHONE>."),
        ("Ring +1 555 123 4567, +49 30 1234 5678 or +44 20 7946 0958.", "Ring <PHONE>, <PHONE> or <PHONE>."),
    ],
)
def test_redacts(text, expected):
    assert redact_pii(text) == expected


@pytest.mark.parametrize(
    "text",
    [
        "The icon logo@2x.png is retina.",
        "Release 1.2.3.4.5 and 10.0.0.256 are not addresses.",
        "On 2019-11-19 it cost 1,234,567 dollars; ISBN 978-3-16-148410-0; order 20191119123456.",
        "The match ended 3-2 at 12:30:45 on 12.05.2019 (+3 points).",
        "C++ and x::y::z are code, not IPv6.",
    ],
)
def test_leaves_look_alikes_alone(text):
    assert redact_pii(text) == text


def test_real_page_text_is_unchanged_without_pii(shared_data):
    text = html_to_text(gzip.decompress((shared_data / "web-pages" / "heise.de.lithium.html.gz").read_bytes()))
    assert redact_pii(text) == text  # a real German news article: dates, numbers, no PII


def test_operator_counts_and_toggles():
    counters.reset()
    doc = {"id": "1", "text": "Mail a@b.org from 10.1.2.3 or call 555-123-4567."}
    out = PiiRedactor()(doc)
    assert out["text"] == "Mail <EMAIL> from <IP> or call <PHONE>."
    assert out["pii_counts"] == {"email": 1, "ip": 1, "phone": 1}
    assert counters.reset() == {"pii/email": 1, "pii/ip": 1, "pii/phone": 1}
    only_mail = PiiRedactor(ips=False, phones=False, email_token="[mail]")(doc)
    assert only_mail["text"] == "Mail [mail] from 10.1.2.3 or call 555-123-4567."
    assert doc["text"].startswith("Mail a@b.org")  # input not mutated


def _redact_without_hints(text: str) -> tuple[str, dict[str, int]]:
    """The redaction as it was before the hints: every full pattern on every text (the oracle)."""
    found = {"email": 0, "ip": 0, "phone": 0}
    if "@" in text:
        text, found["email"] = EMAIL_RE.subn("<EMAIL>", text)
    text, found["ip"] = IPV4_RE.subn("<IP>", text)
    if "::" in text or text.count(":") >= 7:
        text, n6 = IPV6_RE.subn("<IP>", text)
        found["ip"] += n6

    def _phone(m: re.Match) -> str:
        value = m.group(0)
        digits = sum(ch.isdigit() for ch in value)
        if value.startswith("+") and not value.startswith("+1") and not 8 <= digits <= 15:
            return value
        found["phone"] += 1
        return "<PHONE>"

    return PHONE_RE.sub(_phone, text), found


_PII_SAMPLES = (
    "john.doe@example.com",
    "a@b.org",
    "192.168.1.10",
    "8.8.8.8",
    "10.0.0.256",
    "1.2.3.4.5",
    "2001:db8::ff00:42:8329",
    "fe80:0:0:0:202:b3ff:fe1e:8329",
    "fe80::1",
    "2001:DB8::FF00:ABCD",
    "FE80::ABCD",
    "1:2:3::",
    "::ffff:1:2",
    "12:30:45",
    "(555) 123-4567",
    "555-123-4567",
    "555.123.4567",
    "+1 555 123 4567",
    "+1-555-123-4567",
    "+49 30 1234 5678",
    "+44 20 7946 0958",
    "+3 points",
    "+33 (1) 23 45 67 89",
    "2019-11-19",
    "978-3-16-148410-0",
)


def test_the_hints_change_nothing_on_real_pages_and_planted_pii(shared_data):
    """The cheap hints only skip patterns that cannot match: same text and counts as running every
    full pattern, on every real page of shared/data and on pages with PII planted at random places."""
    texts = []
    for path in sorted(shared_data.rglob("*.html*")):
        raw = path.read_bytes()
        texts.append(html_to_text(gzip.decompress(raw) if path.suffix == ".gz" else raw))
    rng = random.Random(7)
    for text in texts[:60]:
        words = text.split(" ")
        for _ in range(8):
            words.insert(rng.randrange(len(words) + 1), rng.choice(_PII_SAMPLES))
        texts.append(" ".join(words))
    texts += [f"x {sample} y" for sample in _PII_SAMPLES] + list(_PII_SAMPLES)
    redactor = PiiRedactor()
    assert sum(_redact_without_hints(t)[1] != {"email": 0, "ip": 0, "phone": 0} for t in texts) >= 80
    for text in texts:
        assert redactor.redact(text) == _redact_without_hints(text), text[:200]
