"""Stage `eval`: QA metrics, coverage metrics, baselines, RAG generation, reports and plots."""
