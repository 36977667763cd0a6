"""What `indexer run` tells the people who watch it: Prometheus metrics, liveness and readiness over HTTP."""
