"""Supporting-paragraph recall@20 of BM25 on each real sample's shared corpus (floors a little
under the measured values: hotpotqa 0.956, 2wiki 0.784, musique 0.686, strategyqa 0.859)."""

from __future__ import annotations

import pytest

from purecover.config import load_recipe
from purecover.data.data_stage import run_data_stage
from purecover.data.samples import SAMPLE_FILES

pytestmark = pytest.mark.samples

FLOORS = {"hotpotqa": 0.94, "2wiki": 0.76, "musique": 0.66, "strategyqa": 0.84}


@pytest.mark.parametrize("dataset", list(FLOORS))
def test_bm25_supporting_recall_at_20(sample_dir, tmp_path, dataset):
    r = load_recipe(None, [f"run_dir={tmp_path}", f"data.dataset={dataset}",
                           f"data.path={sample_dir / SAMPLE_FILES[dataset]}", "data.corpus=shared", "data.k1=20"])
    summary = run_data_stage(r, show_progress=False)
    assert summary.empty_queries == 0
    assert (summary.supporting_recall or 0) >= FLOORS[dataset]
