"""What runs on the cluster and locally: `python -m training COMMAND` (train, synth-data, benchmark)."""
