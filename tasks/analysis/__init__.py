"""The analysis stage: a run's metrics from its rollout files (DuckDB SQL), and the comparison with a baseline."""
