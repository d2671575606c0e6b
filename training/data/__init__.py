"""Datasets from a member's folder to a node's disk: the layout the trainer reads, shards, upload, staging."""
