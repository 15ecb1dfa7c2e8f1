"""The rows `tidelog bench spark` gives Spark's own Parquet copy: shaped as the topic's fill writes them."""

from __future__ import annotations

from pathlib import Path

import pyarrow.parquet as pq

from pipelines.bench import _baseline_parquet


def _rows(path: Path) -> tuple[list[bytes], list[bytes]]:
    t = pq.read_table(path)
    return t.column("key").to_pylist(), t.column("value").to_pylist()


def test_repeated_values_take_turns_and_keys_are_cut_from_them_but_every_nth(tmp_path: Path) -> None:
    path = tmp_path / "r.parquet"
    _baseline_parquet(str(path), 300, 32, first=10, chunk=128, distinct=64)
    keys, values = _rows(path)
    assert len(values) == 300 and {len(v) for v in values} == {32} and {len(k) for k in keys} == {16}
    assert len(set(values)) == 64
    assert all(values[i] == values[i + 64] for i in range(300 - 64))
    fresh = [i for i in range(300) if (10 + i) % 64 == 0]
    assert all(keys[i] == values[i][:16] for i in range(300) if i not in fresh)
    assert len({keys[i] for i in fresh}) == len(fresh)


def test_zero_distinct_values_makes_every_value_and_key_random(tmp_path: Path) -> None:
    path = tmp_path / "d.parquet"
    _baseline_parquet(str(path), 300, 32, chunk=128, distinct=0)
    keys, values = _rows(path)
    assert len(set(values)) == 300 and len(set(keys)) == 300
    assert {len(v) for v in values} == {32} and {len(k) for k in keys} == {16}
