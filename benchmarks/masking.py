"""What masking secrets costs per line, against plain substring replacement in the same run.

Every line peach writes passes ``peach_cli.boundary.mask``. Since issue 49 it masks each
secret in every form a client or a server writes it in (base64 at any alignment and
URL-safe, percent-encoding in either case and with ``+``, JSON escaping applied again and
again), with one regular expression built once per set of secrets, after a check for runs
of characters no encoder changes. The baseline is what masking cost before: ``str.replace``
of seven literal forms per secret (as is, JSON-escaped, percent-encoded, base64 from the
first byte).

Measured for four secrets (a token, a key, a three-line key block, a URL with a password),
on a typical request line, on a 4 KB text, and on a line that holds a secret (the only case
where the expression scans). Reported: microseconds per call (the minimum of ``--repeat``
rounds, the round least disturbed by other work) and the ratio to the baseline. Target: a
line without a secret costs at most 2× the baseline (a few microseconds).

Usage::

    python benchmarks/masking.py
    python benchmarks/masking.py --json
"""

from __future__ import annotations

import argparse
import base64
import json
import timeit
from urllib.parse import quote

from peach_cli.boundary import masker_of

SECRETS = (
    "hunter2-c0ffee-5ca1ab1e",
    "sk-proj-AbCdEf0123456789xyz",
    "-----BEGIN TEST KEY-----\nMIIBOgIBAAJBAKj34GkxFhD9\n0UGmQ7hUiBX2P1hiC2sd4EU\n-----END TEST KEY-----",
    "postgres://u:pa ss@db/x",
)
LINE = (
    'GET /recommend?user=12345&items=a,b,c&lang=en 200 main main#1 12.3 ms  {"result": '
    '[1, 2, 3], "note": "ok"}'
)
TEXTS = {
    "request line": LINE,
    "4 KB text": LINE * 36,
    "line with a secret": LINE
    + " Basic "
    + base64.b64encode(b"user:" + SECRETS[0].encode()).decode(),
}


def literal_forms(values: tuple[str, ...]) -> list[str]:
    """The baseline's forms: each value and line, as is, JSON-escaped, percent-encoded and
    base64 from its first byte."""
    pieces = set()
    for value in values:
        pieces.add(value)
        pieces.update(line.strip() for line in value.splitlines() if len(line.strip()) >= 4)
    forms = set()
    for piece in pieces:
        encoded = base64.b64encode(piece.encode()).decode()
        forms.update(
            [
                piece,
                json.dumps(piece)[1:-1],
                json.dumps(piece, ensure_ascii=False)[1:-1],
                quote(piece, safe=""),
                quote(piece),
                encoded,
                encoded.rstrip("="),
            ]
        )
    return sorted(forms, key=len, reverse=True)


def replace_forms(text: str, forms: list[str]) -> str:
    for form in forms:
        if form in text:
            text = text.replace(form, "***")
    return text


def per_call_us(call, number: int, repeat: int) -> float:
    return min(timeit.repeat(call, number=number, repeat=repeat)) / number * 1e6


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--number", type=int, default=5000)
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    forms = literal_forms(SECRETS)
    masker = masker_of(frozenset(SECRETS))
    assert masker is not None
    rows = []
    for name, text in TEXTS.items():
        baseline = per_call_us(lambda t=text: replace_forms(t, forms), args.number, args.repeat)
        masked = per_call_us(lambda t=text: masker.sub(t), args.number, args.repeat)
        rows.append(
            {"text": name, "chars": len(text), "baseline_us": round(baseline, 2),
             "mask_us": round(masked, 2), "ratio": round(masked / baseline, 2)}
        )  # fmt: skip
    if args.json:
        print(json.dumps(rows, indent=2))
        return
    print(f"{'text':<20} {'chars':>6} {'baseline µs':>12} {'mask µs':>9} {'ratio':>6}")
    for row in rows:
        print(
            f"{row['text']:<20} {row['chars']:>6} {row['baseline_us']:>12} "
            f"{row['mask_us']:>9} {row['ratio']:>5}×"
        )


if __name__ == "__main__":
    main()
