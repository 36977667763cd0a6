"""Sources: wire clients and parsers that turn what the network publishes into normalized records."""
