"""What the bench scripts share: bench_env (the environment, imported first), harness (timing,
the CPU, the dated history) and bench_configs (the model sizes)."""
