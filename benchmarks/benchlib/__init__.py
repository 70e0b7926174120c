"""The benchmarks' library: what the experiments beside it share. An experiment (``benchmarks/<name>.py``, with its
own helpers in ``<name>_parts.py``) imports this package and purecover's public names, never another experiment's
module or a purecover name that starts with an underscore (tests/test_benchmarks_harness.py checks).

* `benchlib.rows`: the row format of every results file, targets and their check;
* `benchlib.harness`: the options every script has, seed rows, merging, the atomic write;
* `benchlib.real_runs`: real-model runs on the sample data (label sources, recipes, the seeded splits, set and
  ranking figures against the gold passages, the student and QA parts) for real_models, teacher_layers,
  released_code, student_sweep, student_readout and answers;
* `benchlib.readout_runs`: the every-question student runs with oracle-proxy labels that student_readout and answers
  share (the data.path list, the labels made once, the real command line's stages as subprocesses, the split).
"""
