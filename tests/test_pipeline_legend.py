"""The pipeline's final table ends with a legend of the figure names it shows (tau3, first_step_stop_rate, ...),
from each stage summary's own field descriptions, and a pointer to the reference."""

from __future__ import annotations

from purecover.pipeline import StageRow, figure_legend, summary_table
from purecover.records import StageSummary
from purecover.stages import summary_type


def _summary(stage: str, **figures) -> StageSummary:
    """A summary of stage `stage` holding `figures` (as a plain StageSummary: the table reads its figures)."""
    return StageSummary.model_validate(figures)


def test_the_legend_names_each_figure_shown_once_with_its_description():
    label = _summary("label", questions=36, mean_size=2.06, first_step_stop_rate=0.0, questions_per_second_rank0=2.5)
    export = _summary("export", format="merged", tau3=1.28, size_bytes=1301587)
    train = _summary("train", tau3=1.28, test_subset_f1=0.43)
    rows = [StageRow("label", "ran", 1.0, label, ""), StageRow("train", "ran", 2.0, train, ""),
            StageRow("export", "ran", 0.5, export, "")]
    table, legend = summary_table(rows), figure_legend(rows).splitlines()
    assert "tau3 1.28" in table and "first_step_stop_rate 0.0" in table
    assert legend[0] == "figures:" and legend[-1].startswith("  every stage's figures: docs/reference/run-files.md")
    described = {line.split(" (")[0].strip(): line for line in legend[1:-1]}
    assert set(described) == {"mean_size", "first_step_stop_rate", "questions_per_second_rank0", "tau3",
                              "test_subset_f1", "size_bytes"}  # once each; plain words (questions, format) left out
    tau3 = summary_type("train").model_fields["tau3"].description.rstrip(".")
    assert described["tau3"] == f"  tau3 (train): {tau3}"
    assert "Rank 0's labelling speed" in described["questions_per_second_rank0"]
