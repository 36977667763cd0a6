"""devshard-indexer: Gonka devshard chain-state indexer."""
__version__ = "0.1.0"
