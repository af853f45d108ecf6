"""The data kept in docs/ stays small enough to travel to the GPU machine."""

import gzip
from pathlib import Path

MEASUREMENTS = Path(__file__).resolve().parents[1] / "docs" / "measurements"


def test_every_results_file_in_the_measurements_is_gzip_compressed():
    plain = sorted(p.relative_to(MEASUREMENTS) for p in MEASUREMENTS.rglob("*.jsonl"))
    assert plain == [], f"compress them (gzip -9n): {plain}"
    packed = sorted(MEASUREMENTS.rglob("*.jsonl.gz"))
    assert len(packed) >= 67
    for path in packed:  # each whole, and rows of JSON
        assert gzip.decompress(path.read_bytes()).lstrip().startswith(b"{"), path
