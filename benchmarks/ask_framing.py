"""How long `peach ask`'s stream decoders take on one very long frame, against a baseline.

A 12 MiB SSE event (one ``data:`` line) and a 12 MiB JSON line arrive in 64 KiB pieces, as
a socket delivers them. Each decoder is fed the pieces one by one; the baseline, measured in
the same run, is the whole-body work on the same bytes: join the pieces once, decode the
UTF-8 once (and parse the JSON once, for the JSON line). A decoder that searches only the
new bytes for the end of a line stays a small multiple of the baseline at every size; one
that rescans what it has buffered grows with the square of the frame.

    python benchmarks/ask_framing.py                  # 12 MiB, 64 KiB pieces, best of 3
    python benchmarks/ask_framing.py --mib 48 --piece-kib 16 --rounds 5
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from peach_cli.client.framing import JSONLinesDecoder, SSEDecoder  # noqa: E402

TARGET_RATIO = 10.0  # a linear decoder is within this factor of the baseline


def pieces_of(data: bytes, size: int) -> list[bytes]:
    return [data[start : start + size] for start in range(0, len(data), size)]


def best_of(rounds: int, run: Callable[[], object]) -> float:
    times = []
    for _ in range(rounds):
        started = time.perf_counter()
        run()
        times.append(time.perf_counter() - started)
    return min(times)


def decode_all(decoder: SSEDecoder | JSONLinesDecoder, pieces: list[bytes]) -> int:
    frames = []
    for piece in pieces:
        frames += decoder.feed(piece)
    frames += decoder.close()
    assert len(frames) == 1, len(frames)
    return len(frames[0].data)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mib", type=float, default=12.0, help="frame size in MiB")
    parser.add_argument("--piece-kib", type=int, default=64, help="network piece in KiB")
    parser.add_argument("--rounds", type=int, default=3, help="best of this many runs")
    options = parser.parse_args()

    size = int(options.mib * 1024 * 1024)
    piece = options.piece_kib * 1024
    text = ("abcdefgh" * (size // 8 + 1))[:size]
    cases: list[tuple[str, bytes, Callable[[], object], Callable[[bytes], object]]] = [
        ("SSE event", f"data: {text}\n\n".encode(), SSEDecoder, lambda whole: whole.decode()),
        (
            "JSON line",
            json.dumps({"text": text}).encode() + b"\n",
            JSONLinesDecoder,
            lambda whole: json.loads(whole.decode()),
        ),
    ]
    print(
        f"one {options.mib:g} MiB frame in {options.piece_kib} KiB pieces, "
        f"best of {options.rounds}:"
    )
    failed = False
    for name, payload, decoder, minimum in cases:
        pieces = pieces_of(payload, piece)

        def run_baseline(pieces: list[bytes] = pieces, minimum=minimum) -> object:
            return minimum(b"".join(pieces))

        def run_decoder(pieces: list[bytes] = pieces, decoder=decoder) -> object:
            return decode_all(decoder(), pieces)

        baseline = best_of(options.rounds, run_baseline)
        decoded = best_of(options.rounds, run_decoder)
        ratio = decoded / baseline if baseline else float("inf")
        verdict = "ok" if ratio <= TARGET_RATIO else "SLOW"
        failed |= ratio > TARGET_RATIO
        print(
            f"  {name:<10} decoder {decoded * 1000:8.1f} ms   baseline (join + decode"
            f"{' + json' if name == 'JSON line' else ''}) {baseline * 1000:7.1f} ms   "
            f"ratio {ratio:5.1f}x (target <= {TARGET_RATIO:g}x: {verdict})"
        )
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
