"""What only a developer's machine needs: synthetic JPEG datasets, Azurite (the storage emulator), a latency
proxy, the data-path demo and the benchmarks (`python -m devtools COMMAND`). Never shipped to the cluster."""
