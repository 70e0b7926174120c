"""Stage `teacher`: prompts, generation backends, attention capture, calibration, estimation, solvers, LANCER, labelling job."""
